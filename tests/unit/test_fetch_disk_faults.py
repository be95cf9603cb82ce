"""A local disk that refuses a write (ENOSPC, EDQUOT, EROFS, EACCES, EIO) fails the file within
seconds, whatever download.retry_minutes says, naming the path, the bytes still needed and the
bytes free; the partial stays. A socket's error is still a transport error, retried in the
budget. The Hub path and the peer path write through the same partial blob, so both fail so."""

from __future__ import annotations

import errno
import fcntl
import os
import time

import pytest

from k3deploy.remote import fetch_weights as fw
from tests.unit.test_fetch_weights_edges import BODY, fetch, serving, setup

peer_fetch = pytest.importorskip("peer_fetch")
fetch_base = pytest.importorskip("fetch_base")
fetch_ranges = pytest.importorskip("fetch_ranges")
direct_io = pytest.importorskip("direct_io")
REAL_PWRITE = os.pwrite


def whole(rng):
    start = int(rng.removeprefix("bytes=").split("-")[0]) if rng else 0
    return 206, {"Content-Range": f"bytes {start}-{len(BODY) - 1}/{len(BODY)}"}, BODY[start:]


def refusing_after(monkeypatch, allowed: int, code: int):
    """os.pwrite of the partial blob takes `allowed` bytes, then fails as a full disk does:
    a short write first, then the error. A direct write (O_DIRECT) takes whole blocks only."""
    left = [allowed]

    def pwrite(fd, data, offset):
        n = min(len(data), left[0])
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            n -= n % direct_io.ALIGN
        if n <= 0:
            raise OSError(code, os.strerror(code))
        left[0] -= n
        return REAL_PWRITE(fd, data[:n], offset)
    monkeypatch.setattr(fetch_ranges.os, "pwrite", pwrite)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EIO])
def test_a_refused_local_write_fails_the_file_at_once_not_after_the_retry_budget(tmp_path, monkeypatch, code):
    refusing_after(monkeypatch, 5000, code)
    with serving(whole) as server:
        began = time.monotonic()
        with pytest.raises(fetch_base.DiskFault, match=errno.errorcode[code]) as caught:
            fetch(tmp_path, server, retry_seconds=60)
    assert time.monotonic() - began < 30      # the budget is 60 s; a retry loop would wait it out
    assert caught.value.path.endswith(".k3deploy-partial")
    partial = next((tmp_path / "hf").rglob("*.k3deploy-partial"))
    assert partial.read_bytes()[:4096] == BODY[:4096]   # the bytes it took are kept


def test_the_run_reports_the_bytes_still_needed_and_free(tmp_path, monkeypatch):
    manifest, spec, cache, progress = setup(tmp_path, "http://127.0.0.1:9")
    fault = fetch_base.DiskFault(cache.partial(spec.etag), "No space left on device (ENOSPC)")
    cache.partial(spec.etag).write_bytes(BODY[:4096])
    found = fw.disk_fault(cache, manifest.files, fault)
    assert found.needed == len(BODY) - os.stat(cache.partial(spec.etag)).st_blocks * 512
    assert found.free > 0 and found.document()["reason"].endswith("(ENOSPC)")
    assert f"{found.needed} more bytes needed, {found.free} free" in str(found)


def test_a_socket_error_is_still_a_transport_error_retried_in_the_budget(tmp_path):
    calls = []

    def answer(rng):
        calls.append(rng)
        if len(calls) == 1:
            raise ConnectionResetError(errno.ECONNRESET, "reset")   # the handler dies: no answer
        return whole(rng)
    with serving(answer) as server:
        part = fetch(tmp_path, server, retry_seconds=30)
    assert part.path.read_bytes() == BODY and len(calls) >= 2


class Response:
    # http.client's HTTPResponse as fetch_http.Answer reads it: a Content-Length body
    status, headers, chunked, length = 200, {}, False, len(BODY)

    class fp:
        @staticmethod
        def readinto1(view):
            n = min(len(view), 1000)
            view[:n] = BODY[:n]
            return n

    def getheader(self, name):
        return None

    def read(self):
        return b""


def test_the_peer_path_fails_on_a_full_disk_without_blaming_the_peer(tmp_path, monkeypatch):
    manifest, spec, cache, progress = setup(tmp_path, "http://127.0.0.1:9")
    part = fw.PartialBlob(cache.partial(spec.etag), spec, progress, cache.ranges(spec.etag))
    block = {"self": "node1", "port": 1, "owner": {spec.path: "node0"}, "nodes": {"node0": "127.0.0.1"}}
    peers = peer_fetch.Peers(block, "s", progress.stop_event, fw.Stopped, lambda m: None, set())
    peer = peers.peers["node0"]
    monkeypatch.setattr(peers, "_request", lambda *a, **k: (type("C", (), {"close": lambda s: None})(),
                                                             Response()))
    refusing_after(monkeypatch, 0, errno.ENOSPC)
    with pytest.raises(fetch_base.DiskFault, match="ENOSPC"):
        peers._get(peer, spec, part)
    assert peer.unreachable_since is None and not peer.bad

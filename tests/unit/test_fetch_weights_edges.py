"""remote/fetch_weights.py's edge branches, in process, against a stdlib HTTP server on
127.0.0.1 that misbehaves on purpose (tests/integration/test_fetch_weights.py runs the script
against the mock Hub for the normal paths, resume after SIGKILL and dropped connections)."""

from __future__ import annotations

import hashlib
import shutil
import http.server
import threading
import time
from collections import namedtuple
from contextlib import contextmanager

import pytest

from k3deploy.remote import fetch_weights as fw
from k3deploy.remote.protocol import SCHEMA_VERSION

BODY = bytes(range(256)) * 40  # 10,240 bytes
SHA = "a" * 40


class Misbehaving(http.server.BaseHTTPRequestHandler):
    """Answers every GET with what `self.server.answer(range_header)` says: (status, headers, body)."""
    protocol_version = "HTTP/1.0"  # the body ends when the connection closes: no length needed

    def do_GET(self):
        self.server.ranges.append(self.headers.get("Range"))
        if getattr(self.server, "with_path", False):
            status, headers, body = self.server.answer(self.headers.get("Range"), self.path,
                                                       self.headers.get("Authorization"))
        else:
            status, headers, body = self.server.answer(self.headers.get("Range"))
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@contextmanager
def serving(answer):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Misbehaving)
    server.answer, server.ranges = answer, []
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def setup(tmp_path, url: str, size: int = len(BODY), body: bytes = BODY, **knobs):
    doc = {"schema": SCHEMA_VERSION, "repo": "moonshotai/Kimi-K3", "sha": SHA, "endpoint": url,
           "files": [{"path": "model.safetensors", "size": size,
                      "sha256": hashlib.sha256(body).hexdigest()}], **knobs}
    manifest = fw.Manifest(doc)
    spec = manifest.files[0]
    cache = fw.RepoCache(str(tmp_path / "hf"), manifest.repo)
    progress = fw.Progress(tmp_path / "progress.json", manifest.files)
    return manifest, spec, cache, progress


def fetch(tmp_path, server, partial: bytes = b"", **knobs):
    knobs = {"connections": 1, "retry_seconds": 5, **knobs}
    manifest, spec, cache, progress = setup(tmp_path, f"http://127.0.0.1:{server.server_port}", **knobs)
    cache.partial(spec.etag).write_bytes(partial)
    part = fw.PartialBlob(cache.partial(spec.etag), spec, progress, cache.ranges(spec.etag))
    try:
        fw.hub_connections(manifest, None, progress).fetch(spec, part)
    finally:
        progress.stop_event.set()  # the connection threads end
    return part


def test_ignored_range_is_read_from_its_offset(tmp_path):
    """A 200 to a ranged request carries the whole file: the bytes before the range are skipped,
    not written over the partial's start."""
    with serving(lambda rng: (200, {"Content-Length": str(len(BODY))}, BODY)) as server:
        part = fetch(tmp_path, server, partial=BODY[:4000])
    assert server.ranges == [f"bytes=4000-{len(BODY) - 1}"]
    assert part.path.read_bytes() == BODY and part.digest() == part.spec.sha256


def test_a_body_longer_than_the_range_is_cut_at_the_range(tmp_path):
    headers = {"Content-Range": f"bytes 4000-{len(BODY) - 1}/{len(BODY)}"}
    with serving(lambda rng: (206, headers, BODY[4000:] + b"extra")) as server:
        part = fetch(tmp_path, server, partial=BODY[:4000])
    assert part.path.read_bytes() == BODY and part.digest() == part.spec.sha256


def test_gives_up_when_no_byte_came_for_the_retry_budget(tmp_path):
    with serving(lambda rng: (503, {}, b"busy")) as server:
        started = time.monotonic()
        with pytest.raises(fw.HubUnavailable, match=r"no new byte for 2s \(retry budget; last: HTTP 503"):
            fetch(tmp_path, server, partial=BODY[:100], retry_seconds=2)
    assert 2 <= time.monotonic() - started < 6
    assert set(server.ranges) == {f"bytes=100-{len(BODY) - 1}"} and len(server.ranges) >= 2


def test_short_answers_that_bring_bytes_never_give_up(tmp_path):
    """Each answer brings 1,024 new bytes, then the connection ends early: ten short answers
    finish the file, whatever the budget."""
    def answer(rng):
        start = int(rng.removeprefix("bytes=").split("-")[0]) if rng else 0
        end = min(start + 1024, len(BODY))
        headers = {"Content-Range": f"bytes {start}-{len(BODY) - 1}/{len(BODY)}"}
        return (206, headers, BODY[start:end]) if rng else (200, {}, BODY[:end])
    with serving(answer) as server:
        part = fetch(tmp_path, server, retry_seconds=30)
    assert len(server.ranges) == 10 and part.path.read_bytes() == BODY


def test_partial_larger_than_the_file_is_dropped(tmp_path):
    manifest, spec, cache, progress = setup(tmp_path, "http://127.0.0.1:9")
    cache.partial(spec.etag).write_bytes(BODY + b"stale tail")
    part = fw.PartialBlob(cache.partial(spec.etag), spec, progress, cache.ranges(spec.etag))
    assert part.have == 0 and cache.partial(spec.etag).stat().st_size == 0


def test_partial_no_larger_than_the_file_is_kept_and_hashed(tmp_path):
    manifest, spec, cache, progress = setup(tmp_path, "http://127.0.0.1:9")
    cache.partial(spec.etag).write_bytes(BODY[:3000])
    part = fw.PartialBlob(cache.partial(spec.etag), spec, progress, cache.ranges(spec.etag))
    assert part.have == part.resumed_from == 3000


def test_a_whole_partial_is_verified_without_asking_any_source(tmp_path):
    """Killed between the last byte and the rename: the partial is the whole file."""
    class NoSource:
        def ready(self, spec):
            pass

        def fetch(self, spec, part):
            raise AssertionError(f"asked for bytes {part.have}- of a whole file")
    manifest, spec, cache, progress = setup(tmp_path, "http://127.0.0.1:9")
    cache.partial(spec.etag).write_bytes(BODY)
    downloader = fw.Downloader(manifest, cache, NoSource(), progress, peers=NoSource())
    downloader._download_verified(spec, downloader.peers)
    assert cache.blob(spec.etag).read_bytes() == BODY and not cache.partial(spec.etag).exists()


Usage = namedtuple("Usage", "total used free")


@pytest.mark.parametrize("free, partial, blob_present, enough", [
    (10240, b"", False, True),
    (10239, b"", False, False),
    (240, BODY[:10000], False, True),       # the partial's bytes are not needed again
    (239, BODY[:10000], False, False),
    (0, b"", True, True),                   # a verified blob needs nothing
])
def test_free_space_check(tmp_path, monkeypatch, free, partial, blob_present, enough):
    manifest, spec, cache, progress = setup(tmp_path, "http://127.0.0.1:9")
    if partial:
        cache.partial(spec.etag).write_bytes(partial)
    if blob_present:
        cache.blob(spec.etag).write_bytes(BODY)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(10**12, 0, free))
    if enough:
        fw.check_free_space(cache, manifest.files)
    else:
        need = len(BODY) - len(partial)
        with pytest.raises(fw.DownloadError, match=f"not enough free space: {need} more bytes needed, {free} free"):
            fw.check_free_space(cache, manifest.files)


def test_no_request_before_the_t_a_429_gave(tmp_path):
    """The Hub's rate limit answer (hub-docs rate-limits.md): every connection waits t (+1 s,
    as huggingface_hub does) before the next request to that host."""
    seen = []

    def answer(rng):
        seen.append(time.monotonic())
        if len(seen) <= 3:
            return 429, {"RateLimit": '"resolvers";r=0;t=1',
                         "RateLimit-Policy": '"fixed window";"resolvers";q=3;w=300'}, b""
        start, end = (int(x) for x in rng.removeprefix("bytes=").split("-"))
        return 206, {"Content-Range": f"bytes {start}-{end}/{len(BODY)}"}, BODY[start:end + 1]
    with serving(answer) as server:
        part = fetch(tmp_path, server, connections=3, retry_seconds=20)
    assert part.digest() == part.spec.sha256
    gaps = [b - a for a, b in zip(seen, seen[1:])]
    assert len(seen) == 4 and min(gaps) >= 2.0, gaps  # t=1, and huggingface_hub's +1 s


def test_cdn_refusal_means_a_fresh_resolve_and_the_cdn_never_gets_the_token(tmp_path):
    cdn_auth, resolves, port = [], [], []

    def answer(rng, path="", auth=None):
        if path.startswith("/cdn"):
            cdn_auth.append(auth)
            if len(cdn_auth) <= 3:
                return 403, {}, b"expired"
            start, end = (int(x) for x in rng.removeprefix("bytes=").split("-"))
            return 206, {"Content-Range": f"bytes {start}-{end}/{len(BODY)}"}, BODY[start:end + 1]
        resolves.append(auth)
        return 302, {"Location": f"http://localhost:{port[0]}/cdn/signed?n={len(resolves)}"}, b""
    with serving(answer) as server:
        server.with_path = True
        port.append(server.server_port)
        manifest, spec, cache, progress = setup(tmp_path, f"http://127.0.0.1:{server.server_port}",
                                                connections=1, retry_seconds=10)
        part = fw.PartialBlob(cache.partial(spec.etag), spec, progress, cache.ranges(spec.etag))
        try:
            fw.hub_connections(manifest, "hf_secret", progress).fetch(spec, part)
        finally:
            progress.stop_event.set()
    assert part.digest() == spec.sha256
    assert len(resolves) >= 3 and all(a == "Bearer hf_secret" for a in resolves)
    assert cdn_auth and all(a is None for a in cdn_auth)

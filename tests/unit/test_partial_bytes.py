"""How many bytes a partial blob holds is decided once (protocol.partial_bytes): the ranged
downloader writes byte ranges anywhere in the file, so a partial's length runs far ahead of
its bytes. The laptop's progress (weights_status) and the peer index (peer_blobs), which peers
read as the owner's progress, both count the allocated bytes; a busy owner whose bytes grow
under a fixed length is never judged stalled by a peer."""

import importlib
import json
import os
from types import SimpleNamespace

import pytest

import k3deploy.remote.fetch_weights  # noqa: F401 (puts the node-side directory on sys.path)

protocol = importlib.import_module("protocol")
peer_blobs = importlib.import_module("peer_blobs")
peer_fetch = importlib.import_module("peer_fetch")
weights_status = importlib.import_module("weights_status")
fetch_cache = importlib.import_module("fetch_cache")

REPO, SHA, ETAG = "moonshotai/Kimi-K3", "a" * 40, "e" * 64
LENGTH, CHUNK = 256 << 20, 1 << 20      # a 256 MB shard, written 1 MB at a time
SPEC = SimpleNamespace(path="model-00001-of-00096.safetensors", etag=ETAG, size=LENGTH)


def sparse_partial(tmp_path, written: int):
    """The partial as the ranged downloader leaves it: full length, `written` bytes at the
    far end (the last range first), holes elsewhere."""
    cache = fetch_cache.RepoCache(str(tmp_path), REPO)
    path = cache.partial(ETAG)
    with open(path, "wb") as fh:
        fh.truncate(LENGTH)
    grow(path, 0, written)
    return cache, path


def grow(path, before: int, after: int):
    with open(path, "r+b") as fh:
        for at in range(before, after, CHUNK):
            fh.seek(LENGTH - at - CHUNK)
            fh.write(b"x" * CHUNK)
        fh.flush()
        os.fsync(fh.fileno())


def sparse_supported(path) -> bool:
    return os.stat(path).st_blocks * 512 < LENGTH


def test_the_peer_index_and_the_status_count_a_sparse_partials_bytes_not_its_length(tmp_path):
    cache, path = sparse_partial(tmp_path, 4 * CHUNK)
    if not sparse_supported(path):
        pytest.skip("this filesystem allocates holes")
    held = protocol.partial_bytes(str(path))
    assert 4 * CHUNK <= held < 8 * CHUNK
    blobs = peer_blobs.Blobs(SimpleNamespace(files=[SPEC]), cache)
    assert blobs.index()["partial"] == {ETAG: held}
    manifest = {"repo": REPO, "sha": SHA,
                "files": [{"path": SPEC.path, "size": LENGTH, "sha256": ETAG}]}
    missing, partial, done = weights_status.verified_files(manifest, str(tmp_path))
    assert (missing, partial, done) == ([SPEC.path], held, 0)


class Clock:
    now = 100.0

    def __call__(self):
        return self.now


def test_a_busy_owner_whose_bytes_grow_under_a_fixed_length_is_never_judged_stalled(
        tmp_path, monkeypatch):
    """node0 waits for a file node1 owns; node1's partial is at full length from the start and
    gains 1 MB every 10 s. Over 100 s (more than three times stall_seconds) node0 waits."""
    cache, path = sparse_partial(tmp_path, CHUNK)
    if not sparse_supported(path):
        pytest.skip("this filesystem allocates holes")
    owner = peer_blobs.Blobs(SimpleNamespace(files=[SPEC]), cache)
    monkeypatch.setattr(peer_blobs, "INDEX_REUSE", 0)
    block = {"self": "node0", "port": 8951, "stall_seconds": 30, "owner": {SPEC.path: "node1"},
             "nodes": {"node1": "10.0.0.2"}}
    made = peer_fetch.Peers(block, "s" * 32, None, RuntimeError, lambda _: None, set())

    def request(peer, method, path, headers=None, timeout=None):
        body = json.dumps({**owner.index(), "downloader": "running"}).encode()
        return SimpleNamespace(close=lambda: None), SimpleNamespace(status=200, read=lambda: body)

    clock = Clock()
    monkeypatch.setattr(made, "_request", request)
    monkeypatch.setattr(peer_fetch.time, "monotonic", clock)
    written = CHUNK
    for _ in range(10):
        with pytest.raises(peer_fetch.NotYet):
            made.ready(SPEC)
        grow(path, written, written + CHUNK)
        written += CHUNK
        clock.now += 10 + peer_fetch.INDEX_TTL
    assert os.stat(path).st_size == LENGTH   # the length never moved; the bytes did

"""The peer index serves what the downloader's ledger vouches for, and the downloader's worker
processes write that ledger while the peer server runs: the index reads it again when it was
replaced, and a ledger it cannot read leaves what it read before in force."""

import importlib
import os
from types import SimpleNamespace

import k3deploy.remote.fetch_weights  # noqa: F401 (puts the node-side directory on sys.path)

peer_blobs = importlib.import_module("peer_blobs")
fetch_cache = importlib.import_module("fetch_cache")

REPO = "moonshotai/Kimi-K3"
SPECS = [SimpleNamespace(path=f"model-0000{i}-of-00002.safetensors", etag=c * 64, size=4096)
         for i, c in ((1, "a"), (2, "b"))]


def blob(cache, spec):
    path = cache.blob(spec.etag)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * spec.size)
    return path


def bump(path, ns):
    """A later mtime than the last write, as a later record gets (the index keys on it)."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + ns))


def test_the_index_serves_what_another_process_recorded_after_it_started(tmp_path):
    cache = fetch_cache.RepoCache(str(tmp_path), REPO)
    first, second = (blob(cache, s) for s in SPECS)
    worker = fetch_cache.Ledger(cache.ledger, cache.locks)
    worker.record(SPECS[0].etag, first)
    index = peer_blobs.Blobs(SimpleNamespace(files=SPECS), cache)
    assert index.open(SPECS[0].etag) is not None and index.open(SPECS[1].etag) is None

    fetch_cache.Ledger(cache.ledger, cache.locks).record(SPECS[1].etag, second)  # another worker
    bump(cache.ledger, 1_000_000)
    opened = index.open(SPECS[1].etag)
    assert opened is not None
    opened.close()

    cache.ledger.write_text("{not json")       # unreadable: what was read stays
    bump(cache.ledger, 2_000_000)
    for spec in SPECS:
        opened = index.open(spec.etag)
        assert opened is not None
        opened.close()

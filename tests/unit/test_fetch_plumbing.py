"""The node downloader's range and connection plumbing: remote/fetch_ranges.py's running hash under
out-of-order writes, as many connections make them, and remote/fetch_hub.py's connections."""
from __future__ import annotations

import hashlib
import os

from k3deploy.remote import fetch_weights  # noqa: F401  (puts the node-side modules on sys.path)
from fetch_manifest import FileSpec  # noqa: E402
from fetch_progress import Progress  # noqa: E402
from fetch_ranges import PartialBlob  # noqa: E402


class LandsMidHash:
    """The hasher; on its first update (the hash is reading the prefix) the next range lands."""

    def __init__(self, hasher, land):
        self.hasher, self.land = hasher, land

    def update(self, data):
        self.hasher.update(data)
        land, self.land = self.land, None
        if land:
            land()

    def hexdigest(self):
        return self.hasher.hexdigest()


def test_the_hash_never_sees_bytes_read_ahead_before_they_were_written(tmp_path):
    """A later range lands first (a hole before it); the prefix then grows while the hash reads
    it. A buffered reader had read ahead into the hole and handed its zeros back after its
    seek: the digest was wrong, the file fetched again (at 8 nodes ~10% of the Hub bytes)."""
    body = os.urandom(64 << 10)
    spec = FileSpec({"path": "model.safetensors", "size": len(body), "sha256": hashlib.sha256(body).hexdigest()})
    part = PartialBlob(tmp_path / "blob.partial", spec, Progress(tmp_path / "progress.json", [spec]))
    with part.open() as f:
        part.write_at(f, 32 << 10, body[32 << 10:])   # a later range first: a hole before it
        part.write_at(f, 0, body[:1000])
        part.hasher = LandsMidHash(part.hasher, lambda: part.write_at(f, 1000, body[1000:32 << 10]))
        part.advance_hash(wait=True)
        assert part.hasher.land is None and part.hashed == len(body)
        assert part.digest() == spec.sha256


def test_every_cdn_connection_shares_one_tls_context():
    """A Client left to itself builds a TLS context per connection, loading the CA bundle each
    time: with connections replaced several times a second, half the downloader's CPU."""
    import threading

    from fetch_hub import HubSource  # noqa: E402
    from fetch_manifest import Manifest  # noqa: E402
    from fetch_retry import Gate  # noqa: E402
    from k3deploy.remote.protocol import with_schema

    manifest = Manifest(with_schema({"repo": "org/model", "sha": "a" * 40, "endpoint": "https://hub.example",
                                     "files": [{"path": "config.json", "size": 2, "oid": "b" * 40}]}))
    stop = threading.Event()
    source = HubSource(manifest, None, stop, Gate(stop))
    first, second = source.link(), source.link()
    clients = [first.get(), second.get()]
    assert first.tls is second.tls and first.tls is not True
    assert clients[0] is not clients[1]   # still one TCP connection each (a slow edge is replaced alone)
    for link in (first, second):
        link.renew()

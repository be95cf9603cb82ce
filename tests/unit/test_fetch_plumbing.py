"""The node downloader's range and connection plumbing: remote/fetch_ranges.py's running hash under
out-of-order writes, as many connections make them, and remote/fetch_hub.py's connections."""
from __future__ import annotations

import hashlib
import os
import threading
import time

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


def _part(tmp_path, body):
    spec = FileSpec({"path": "model.safetensors", "size": len(body), "sha256": hashlib.sha256(body).hexdigest()})
    return spec, PartialBlob(tmp_path / "blob.partial", spec, Progress(tmp_path / "progress.json", [spec]))


def test_a_partial_written_front_to_back_has_no_record_and_resumes_from_its_length(tmp_path):
    """The peer source appends at the prefix: the record would say what the length says, so
    none is written, and a run killed half-way resumes from every byte on disk."""
    body = os.urandom(96 << 10)
    spec, part = _part(tmp_path, body)
    with part.open() as f:
        for at in range(0, 48 << 10, 8 << 10):
            part.append(f, memoryview(body)[at:at + (8 << 10)], "node1", at)
        part.save()
    assert not part.record.exists() and part.hashed == 48 << 10
    again = PartialBlob(part.path, spec, part.progress)   # the next run, after a SIGKILL
    assert again.done == [[0, 48 << 10]] and again.hashed == 48 << 10
    with again.open() as f:
        again.append(f, body[48 << 10:], "node2", 48 << 10)
        again.finish(f)
    assert again.digest() == spec.sha256 and not again.record.exists()


def test_a_range_past_the_prefix_is_recorded_with_the_prefix_before_it(tmp_path):
    """Once a range lands past the prefix (Hub connections), the length no longer says what is
    there: the record names both, and a reload trusts the record, not the length."""
    body = os.urandom(64 << 10)
    spec, part = _part(tmp_path, body)
    with part.open() as f:
        part.append(f, body[:4096], "node1", 0)
        part.write_at(f, 32 << 10, body[32 << 10:40 << 10])
        part.save()
    again = PartialBlob(part.path, spec, part.progress)
    assert again.done == [[0, 4096], [32 << 10, 40 << 10]] and again.prefix == 4096


def test_appended_bytes_are_hashed_from_memory_not_read_back(tmp_path, monkeypatch):
    """Appends at the hashed end need no read of the file; a gap left by a restart still does."""
    body = os.urandom(40 << 10)
    spec, part = _part(tmp_path, body)
    reads = []
    real_pread = os.pread
    monkeypatch.setattr(os, "pread", lambda *a: reads.append(a[1]) or real_pread(*a))
    with part.open() as f:
        for at in range(0, len(body), 10 << 10):
            part.append(f, body[at:at + (10 << 10)], "node1", at)
    assert reads == [] and part.digest() == spec.sha256
    part.restart()
    assert part.hashed == 0 and part.length == 0 and not part.record.exists()


def test_the_record_is_rewritten_at_most_every_record_gap_while_ranges_land(tmp_path, monkeypatch):
    """Early in a file 2% of the record is less than one chunk: without the gap every chunk
    rewrote it. With it, chunks landing within RECORD_GAP share one rewrite, and the next one
    after the gap names them all."""
    import fetch_ranges
    body = os.urandom(256 << 10)
    spec, part = _part(tmp_path, body)
    clock, saves = [100.0], []
    monkeypatch.setattr(fetch_ranges.time, "monotonic", lambda: clock[0])
    real_write = fetch_ranges.write_json_atomic
    monkeypatch.setattr(fetch_ranges, "write_json_atomic", lambda p, d: saves.append(d) or real_write(p, d))
    with part.open() as f:
        for at in range(64 << 10, 128 << 10, 4 << 10):   # past the prefix: Hub connections
            part.write_at(f, at, body[at:at + (4 << 10)])
            clock[0] += fetch_ranges.RECORD_GAP * 0.3
    # The first range at once, then every fourth chunk (0.3 of a gap apart): 4 of 16 chunks.
    assert len(saves) == 4 and saves[-1]["done"] == [[64 << 10, (64 + 13 * 4) << 10]]
    again = PartialBlob(part.path, spec, part.progress)   # a SIGKILL now: what the record names
    assert again.done == saves[-1]["done"]


def test_bytes_arriving_faster_than_the_gap_never_leave_the_record_far_behind(tmp_path, monkeypatch):
    """Within one RECORD_GAP (the clock stands still) a fast file still gets its record rewritten
    once LAG_SHARE of it (at least LAG_FLOOR) is unnamed: a SIGKILL at any chunk loses at most
    that, never a whole gap's bytes."""
    import fetch_ranges
    body = os.urandom(2 << 20)
    spec, part = _part(tmp_path, body)
    monkeypatch.setattr(fetch_ranges.time, "monotonic", lambda: 100.0)
    saves = []
    real_write = fetch_ranges.write_json_atomic
    monkeypatch.setattr(fetch_ranges, "write_json_atomic", lambda p, d: saves.append(d) or real_write(p, d))
    chunk, start = 16 << 10, 64 << 10   # past the prefix: Hub connections
    with part.open() as f:
        for at in range(start, len(body), chunk):
            part.write_at(f, at, body[at:at + chunk])
            named = PartialBlob(part.path, spec, part.progress).done   # a SIGKILL now
            have, kept = at + chunk - start, sum(e - s for s, e in named)
            assert have - kept <= max(fetch_ranges.LAG_SHARE * kept, fetch_ranges.LAG_FLOOR) + chunk
    assert len(saves) < len(range(start, len(body), chunk)) / 2   # not a rewrite per chunk


def test_connections_writing_one_file_take_turns_at_the_disk(tmp_path, monkeypatch):
    """Ranges of one file written from several connection threads: one pwrite at a time (the
    kernel holds the file's inode lock for each write, and threads queued there spin), each
    range lands whole and the file hashes right."""
    body = os.urandom(256 << 10)
    spec, part = _part(tmp_path, body)
    inside, most, guard = [0], [0], threading.Lock()
    real_pwrite = os.pwrite

    def pwrite(fd, data, at):
        with guard:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.005)   # widens the window in which a second writer would overlap
        try:
            return real_pwrite(fd, data, at)
        finally:
            with guard:
                inside[0] -= 1

    monkeypatch.setattr(os, "pwrite", pwrite)
    step = 16 << 10
    with part.open() as f:
        threads = [threading.Thread(target=lambda at=at: part.write_at(f, at, body[at:at + step]))
                   for at in range(0, len(body), step)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        part.finish(f)
    assert most[0] == 1 and part.done == [[0, len(body)]]
    assert part.digest() == spec.sha256

"""The partial blob on disk and its resume record: which byte ranges of it are written.

Several connections fill one file at different offsets, so "the partial's length" no longer says
what is there. Beside the data file (protocol.partial_path) a JSON record
(protocol.ranges_path) lists every finished range; it is rewritten atomically (write, rename)
after the bytes it names were written, so a SIGKILL at any moment leaves a record that claims
nothing unwritten. Neither name ends in `.incomplete`: `hf cache prune` deletes
`blobs/*.incomplete` (huggingface_hub utils/_cache_manager.py `_scan_incomplete_files`,
cli/cache.py `prune`), and with it hours of a node's download.

The running hash covers the contiguous prefix from byte 0; it is advanced by re-reading what
the connections wrote, once per byte, in order. Bytes go to the disk and back past the page
cache where the file system allows (direct_io). Bytes appended at the hashed end (the peer
source writes front to back) are hashed from the buffer they were just written from: no open
and read back per chunk.

A partial that is exactly its prefix (written front to back, nothing past it, no record yet)
gets no record: its length says the same (`_load`'s fallback), and a record rewritten after
every chunk would cost several atomic writes per peer file for nothing.
"""
from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable, Sequence
from io import BufferedRandom
from pathlib import Path

import protocol
from direct_io import DiskFile
from fetch_base import log, on_local_disk, write_json_atomic
from fetch_manifest import FileSpec
from fetch_progress import Progress

# The record is rewritten once the bytes it does not name yet pass RECORD_SHARE of what it names,
# or RECORD_EVERY seconds: a SIGKILL costs at most ~2% of the bytes on disk (plus half a second).
# Not more often than every RECORD_GAP seconds: while a file's record names little, 2% of it is
# less than one read of a socket, and a rewrite per chunk (145 per 2 MB file in 4 kB chunks)
# would take a large share of a downloader's GIL time on slow CDN edges.
# But never more than LAG_SHARE of what it names (at least LAG_FLOOR) behind, gap or no gap: a
# file arriving faster than that share per gap (early in any file, when the record is small)
# would otherwise leave a whole gap's bytes unnamed, lost at a SIGKILL.
RECORD_EVERY, RECORD_SHARE, RECORD_GAP = 0.5, 0.02, 0.1
LAG_SHARE, LAG_FLOOR = 0.03, 16 << 10


def merge(ranges: Iterable[Sequence[int]]) -> list[list[int]]:
    out: list[list[int]] = []
    for start, end in sorted((int(s), int(e)) for s, e in ranges if e > s):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return out


def gaps(done: Iterable[Sequence[int]], size: int) -> list[tuple[int, int]]:
    """The ranges of [0, size) not in `done` (merged)."""
    out: list[tuple[int, int]] = []
    at = 0
    for start, end in done:
        if start > at:
            out.append((at, start))
        at = max(at, end)
    if at < size:
        out.append((at, size))
    return out


class PartialBlob:
    """The partial data file, its record of finished ranges, and a hash of its prefix."""

    def __init__(self, path: Path, spec: FileSpec, progress: Progress, record: Path | None = None):
        self.path, self.spec, self.progress = path, spec, progress
        self.record = record or path.with_name(path.name + ".ranges.json")
        self.lock, self.hash_lock, self.save_lock = threading.Lock(), threading.Lock(), threading.Lock()
        # One writer at a time: the kernel takes the file's inode lock for each buffered write
        # anyway, and writers waiting on it spin (optimistic rwsem spinning) where these sleep.
        # Four threads writing one tmpfs file: 0.71 CPU-s/GB free, 0.45 behind this lock.
        self.write_lock = threading.Lock()
        self.disk: DiskFile | None = None   # opened at the first write or read-back
        self.sources: set[str] = set()
        self.recorded_once = self.record.exists()  # a record on disk is kept up to date
        self.done = self._load()
        self.length = self.path.stat().st_size
        self.hasher, self.hashed = spec.new_hasher(), 0
        self.advance_hash()
        self.resumed_from, self.written_at, self.recorded = self.have, 0.0, self.have
        progress.partial(spec, self.have)

    def _load(self) -> list[list[int]]:
        size = self.path.stat().st_size if self.path.exists() else 0
        if size > self.spec.size:
            log(f"{self.spec.path}: partial file is larger than the file; starting over")
            self.path.unlink()
            self.record.unlink(missing_ok=True)
            size = 0
        with on_local_disk(self.path):
            self.path.touch()
        try:
            doc = json.loads(self.record.read_text())
            if doc.get("size") == self.spec.size:
                return merge([r for r in doc["done"] if 0 <= r[0] < r[1] <= size])
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            pass
        # No record: written front to back (a peer, an older k3deploy, an adopted
        # huggingface_hub partial), so its length is its prefix.
        return [[0, size]] if size else []

    @property
    def have(self) -> int:
        return sum(e - s for s, e in self.done)

    @property
    def prefix(self) -> int:
        return self.done[0][1] if self.done and self.done[0][0] == 0 else 0

    def missing(self) -> list[tuple[int, int]]:
        with self.lock:
            return gaps(self.done, self.spec.size)

    def open(self) -> BufferedRandom:
        """A handle for writes at any offset (not O_APPEND: Linux pwrite ignores the offset there)."""
        with on_local_disk(self.path):
            return open(self.path, "r+b")

    def write_at(self, f: BufferedRandom, offset: int, data: bytes | bytearray | memoryview,
                 source: str = "hub") -> None:
        with on_local_disk(self.path), self.write_lock:
            self._disk().write(f.fileno(), data, offset)
        with self.lock:
            self.done = merge([*self.done, [offset, offset + len(data)]])
            self.length = max(self.length, offset + len(data))
            self.sources.add(source)
            due = not self._plain() and self._record_due()
        self.progress.received_bytes(self.spec, len(data), source)
        if due:
            self.save(wait=False)

    def _record_due(self) -> bool:
        """Called with self.lock held."""
        unnamed = sum(e - s for s, e in self.done) - self.recorded
        since = time.monotonic() - self.written_at
        return (since > RECORD_EVERY or unnamed > max(LAG_SHARE * self.recorded, LAG_FLOOR)
                or since >= RECORD_GAP and unnamed > RECORD_SHARE * self.recorded)

    def _plain(self) -> bool:
        """Exactly its prefix and never recorded: `_load` reads its length as what it holds.
        Called with self.lock held."""
        return not self.recorded_once and (not self.done or self.done == [[0, self.length]])

    def append(self, f: BufferedRandom, data: bytes | memoryview, source: str = "hub",
               offset: int | None = None) -> None:
        """Sequential writes (the peer source) at `offset`, by default the prefix; the hash
        follows at once, from `data` when it continues the hashed bytes."""
        at = self.prefix if offset is None else offset
        self.write_at(f, at, data, source)
        self.advance_hash(written=(at, data))

    def save(self, wait: bool = True) -> None:
        """Write the record. Its file is written outside the lock the writers take (they wait
        for no disk); saves go one at a time, in order, and a writer finding one under way
        leaves it (wait=False): the next one is due soon."""
        if not self.save_lock.acquire(blocking=wait):
            return
        try:
            with self.lock:
                if self._plain():
                    return
                doc: dict[str, protocol.JSONable] = {"size": self.spec.size,
                                                     "done": [list(r) for r in self.done]}
                self.written_at, self.recorded = time.monotonic(), sum(e - s for s, e in self.done)
                self.recorded_once = True
            with on_local_disk(self.record):
                write_json_atomic(self.record, doc)
        finally:
            self.save_lock.release()

    def advance_hash(self, wait: bool = False,
                     written: tuple[int, bytes | memoryview] | None = None) -> None:
        """Hash the newly contiguous bytes; a thread finding another at it leaves it the work
        (the last one, digest(), waits and finishes it). `written` (offset, bytes just written
        there): hashed from memory when they continue the hashed bytes."""
        if self.hashed >= self.prefix or not self.hash_lock.acquire(blocking=wait):
            return
        try:
            if written is not None and written[0] == self.hashed:
                self.hasher.update(written[1])
                self.hashed += len(written[1])
            if self.hashed < self.prefix:
                self._hash_from_disk()
        finally:
            self.hash_lock.release()

    def _hash_from_disk(self) -> None:
        """Called with hash_lock held."""
        with on_local_disk(self.path):
            while self.hashed < self.prefix:   # the prefix may grow while it is read
                fed = self._disk().hash_into(self.hasher, self.hashed, self.prefix)
                if not fed:
                    break
                self.hashed += fed

    def _disk(self) -> DiskFile:
        with self.lock:
            if self.disk is None:
                self.disk = DiskFile(self.path)
            return self.disk

    def digest(self) -> str | None:
        """The hex digest once every byte is written and hashed, else None."""
        self.advance_hash(wait=True)
        if self.hashed != self.spec.size:
            return None
        self.close()   # every byte is written and read back: nothing more for the direct handle
        return self.hasher.hexdigest()

    def finish(self, f: BufferedRandom) -> None:
        with on_local_disk(self.path):
            f.flush()
            os.fsync(f.fileno())
        self.save()

    def restart(self, f: BufferedRandom | None = None) -> None:
        with self.hash_lock, self.lock:
            os.truncate(self.path, 0)
            self.done, self.hasher, self.hashed, self.resumed_from = [], self.spec.new_hasher(), 0, 0
            self.length, self.recorded_once = 0, False
        self.record.unlink(missing_ok=True)
        self.progress.partial(self.spec, 0)

    def close(self) -> None:
        """Lets go of the direct handle and its buffers (a partial that is dropped unfinished
        has them let go when it is collected)."""
        with self.write_lock, self.hash_lock, self.lock:
            disk, self.disk = self.disk, None
        if disk is not None:
            disk.close()

    def discard(self) -> None:
        self.close()
        for p in (self.path, self.record):
            p.unlink(missing_ok=True)

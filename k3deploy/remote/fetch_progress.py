"""The progress document the laptop polls (k3deploy.steps.weights.download, remote/weights_status.py):
bytes and files done, the rate, and where the bytes came from (Hub or which peer)."""
from __future__ import annotations

import collections
import os
import threading
import time
from pathlib import Path
from typing import TypedDict

import protocol
from fetch_base import local_fault, overwrite_json, write_json_atomic
from fetch_manifest import FileSpec


class ProgressDetail(TypedDict, total=False):
    """A worker process's own files and bytes (Progress._detail), for its parent to add up."""
    verified: list[str]
    on_disk: dict[str, int]
    by_source: dict[str, int]
    received: int
    hub_unavailable: list[str]


class WorkerDoc(TypedDict, total=False):
    """What a parent reads of its worker processes' progress documents (Progress.document);
    {} when a worker wrote none yet (fetch_workers.Workers.docs)."""
    state: str
    error: str | None
    transient: bool
    detail: ProgressDetail
    bad_peers: list[str]
    disk: protocol.Doc | None


class Progress:
    """Counters the laptop polls, written atomically about once a second and at the end."""

    def __init__(self, path: Path, files: list[FileSpec], detail: bool = False):
        self.path, self.lock, self.files = path, threading.Lock(), files
        # a worker process's document also says which files and bytes are whose: its parent
        # adds them up (`absorb`) into the node's document (fetch_workers.py)
        self.detail, self.processes = detail, 1
        self.verified: set[str] = set()
        self.on_disk: dict[str, int] = {}  # partial bytes of files in flight
        self.received = 0
        self.samples: collections.deque[tuple[float, int]] = collections.deque(maxlen=12)
        self.by_source: dict[str, int] = {}  # "hub" or a peer's name -> bytes received
        self.bad_peers: set[str] = set()      # peers that served bytes failing a checksum
        self.hub_unavailable: set[str] = set()  # files failed by the retry budget alone
        self.transient = False                # the run failed only of those: worth a restart
        self.disk: protocol.Doc | None = None   # fetch_base.DiskFault.document() of a disk fault
        self.started, self.state = time.time(), "running"
        self.error: str | None = None
        self.stop_event = threading.Event()

    def partial(self, spec: FileSpec, have: int) -> None:
        with self.lock:
            self.on_disk[spec.path] = have

    def received_bytes(self, spec: FileSpec, n: int, source: str = "hub") -> None:
        with self.lock:
            self.on_disk[spec.path] = self.on_disk.get(spec.path, 0) + n
            self.received += n
            self.by_source[source] = self.by_source.get(source, 0) + n

    def file_done(self, spec: FileSpec) -> None:
        with self.lock:
            self.on_disk.pop(spec.path, None)
            self.verified.add(spec.path)

    def document(self) -> protocol.Doc:
        with self.lock:
            now = time.time()
            self.samples.append((now, self.received))
            t0, r0 = self.samples[0]
            done = [f for f in self.files if f.path in self.verified]
            shards = [f for f in self.files if f.path.endswith(".safetensors")]
            return protocol.with_schema({"pid": os.getpid(), "state": self.state, "error": self.error,
                    "bytes_total": sum(f.size for f in self.files),
                    "bytes_done": sum(f.size for f in done) + sum(self.on_disk.values()),
                    "rate_bps": int((self.received - r0) / (now - t0)) if now > t0 else 0,
                    "files_total": len(self.files), "files_done": len(done),
                    "shards_total": len(shards), "shards_done": sum(f.path in self.verified for f in shards),
                    "hub_bytes": self.by_source.get("hub", 0),
                    "peer_bytes": sum(n for s, n in self.by_source.items() if s != "hub"),
                    "peer_bytes_by": {s: n for s, n in self.by_source.items() if s != "hub"},
                    "bad_peers": [*sorted(self.bad_peers)], "transient": self.transient,
                    "disk": self.disk, "worker_processes": self.processes,
                    "started": self.started, "updated": now, **self._detail()})

    def _detail(self) -> protocol.Doc:
        """Called with self.lock held: a ProgressDetail under "detail"."""
        if not self.detail:
            return {}
        return {"detail": {"verified": [*sorted(self.verified)], "on_disk": {**self.on_disk},
                           "by_source": {**self.by_source}, "received": self.received,
                           "hub_unavailable": [*sorted(self.hub_unavailable)]}}

    def absorb(self, docs: list[WorkerDoc]) -> None:
        """The workers' documents as this one's counters (each worker's files are its own)."""
        verified: set[str] = set()
        on_disk: dict[str, int] = {}
        by_source: dict[str, int] = {}
        received = 0
        bad: set[str] = set()
        hub: set[str] = set()
        for doc in docs:
            detail: ProgressDetail = doc.get("detail") or {}
            verified |= set(detail.get("verified") or ())
            on_disk.update(detail.get("on_disk") or {})
            for source, n in (detail.get("by_source") or {}).items():
                by_source[source] = by_source.get(source, 0) + n
            received += detail.get("received", 0)
            bad |= set(doc.get("bad_peers") or ())
            hub |= set(detail.get("hub_unavailable") or ())
        with self.lock:
            self.verified, self.on_disk, self.by_source = verified, on_disk, by_source
            self.received, self.bad_peers, self.hub_unavailable = max(self.received, received), bad, hub

    def write(self) -> None:
        doc = self.document()
        try:
            write_json_atomic(self.path, doc)
        except OSError as e:
            if not local_fault(e):
                raise
            overwrite_json(self.path, doc)

    def run_reporter(self) -> threading.Thread:
        def loop() -> None:
            while not self.stop_event.wait(1.0):
                self.write()
        thread = threading.Thread(target=loop, name="progress", daemon=True)
        thread.start()
        return thread

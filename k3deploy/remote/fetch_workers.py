"""The downloader over several worker processes: the node's per-byte work (TLS, receive, hash,
write) on as many cores as it has, not on one interpreter's.

Every worker is fetch_weights.py itself, started by the first one (the parent) with
`--worker I/N` on the same manifest: it owns a share of the files (`share`: each file to the
worker with the fewest bytes so far, in manifest order, so every worker goes through its files
earliest first), with its own Hub connections (`connections` split between the workers), its
own retry gate and its own peer source, and writes its own progress document beside the
node's (`<progress>.w<I>`). A file is one worker's from its first byte to its rename: its
segments, its resume record and its running hash (re-read from the page cache, in order) stay
in one process, as in a single downloader; a worker killed in any way leaves its partials as a
killed downloader does, resumed by the next run.

The parent holds the run lock, checks the space, writes the tree and the refs, and is what the
laptop sees: its pid, and the progress document it writes from the workers' (`absorb`). A
SIGTERM to it is passed to every worker; a worker dies with the parent (PR_SET_PDEATHSIG, and
a look at its parent's pid), so a SIGKILL of the parent leaves no worker writing. A disk fault
in one worker stops the others at once (the run stops within seconds, as with one process).

How many: the manifest's `worker_processes`, else one per PROCESS_BYTES of the files, at most
min(cores, MAX_PROCESSES): a worker costs an interpreter and huggingface_hub's import (about a
third of a CPU-second and 50 MB), which a few MB of files do not repay. Standard library only.
"""
from __future__ import annotations

import ctypes
import json
import math
import os
import signal
import subprocess
import sys
import time
from argparse import Namespace
from collections.abc import Callable
from pathlib import Path

import protocol
from fetch_base import DiskFault, DownloadError, log, raise_first
from fetch_cache import RepoCache, disk_fault
from fetch_manifest import FileSpec, Manifest
from fetch_progress import Progress, WorkerDoc

MAX_PROCESSES = 8
PROCESS_BYTES = 512 << 20
PR_SET_PDEATHSIG = 1
LOOK = 0.5            # seconds between looks at the workers


class Ended(WorkerDoc):
    """A worker's last document, with its exit code (Workers.wait)."""
    exit: int | None


def count(manifest: Manifest) -> int:
    asked = getattr(manifest, "worker_processes", None)
    if asked is None:
        total = sum(f.size for f in manifest.files)
        asked = min(os.cpu_count() or 1, MAX_PROCESSES, max(1, total // PROCESS_BYTES))
    return max(1, min(int(asked), len(manifest.files)))


def share(files: list[FileSpec], workers: int, index: int) -> list[FileSpec]:
    """The files of worker `index` of `workers`: each file, in order, to the least loaded."""
    load: list[int] = [0] * workers
    mine: list[FileSpec] = []
    for spec in files:
        least = min(range(workers), key=lambda w: (load[w], w))
        load[least] += max(spec.size, 1)
        if least == index:
            mine.append(spec)
    return mine


def as_worker(manifest: Manifest, worker: str) -> None:
    """Narrow the manifest to this worker's share and its part of the node's connections."""
    first, _, total = worker.partition("/")
    index, workers = int(first), int(total)
    manifest.files = share(manifest.files, workers, index)
    manifest.max_workers = math.ceil(manifest.max_workers / workers)
    manifest.connections = math.ceil(manifest.connections / workers)
    manifest.replace_per_second = manifest.replace_per_second / workers
    die_with_parent()


def die_with_parent() -> None:
    """SIGKILL when the parent dies (Linux prctl); if it is gone already, now."""
    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent or parent == 1:
        os.kill(os.getpid(), signal.SIGKILL)


def worker_progress(progress: Path, index: int) -> Path:
    return progress.with_name(f"{progress.name}.w{index}")


class Workers:
    """The running workers, as the parent starts, watches and stops them."""

    def __init__(self, script: str, argv: list[str], progress: Path, workers: int):
        self.paths = [worker_progress(progress, i) for i in range(workers)]
        for path in self.paths:
            path.unlink(missing_ok=True)
        self.procs = [subprocess.Popen([sys.executable, script, *argv, "--progress", str(path),
                                        "--worker", f"{i}/{workers}"], stdin=subprocess.DEVNULL)
                      for i, path in enumerate(self.paths)]

    def docs(self) -> list[WorkerDoc]:
        out: list[WorkerDoc] = []
        for path in self.paths:
            try:
                out.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                out.append({})
        return out

    def running(self) -> bool:
        return any(p.poll() is None for p in self.procs)

    def signal(self, signum: int) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    def wait(self, progress: Progress, stopping: Callable[[], bool]) -> list[Ended]:
        """Until every worker ended: absorb their documents into `progress` every LOOK seconds,
        pass a stop on, and stop the rest when one met a disk fault. Their last documents."""
        told = False
        while self.running():
            time.sleep(LOOK)
            docs = self.docs()
            progress.absorb(docs)
            if not told and (stopping() or any(d.get("disk") for d in docs)):
                self.signal(signal.SIGTERM)
                told = True
        docs = self.docs()
        progress.absorb(docs)
        for path in self.paths:
            path.unlink(missing_ok=True)
        return [{**d, "exit": p.returncode} for d, p in zip(docs, self.procs)]


def outcome(ended: list[Ended]) -> tuple[list[str], bool, protocol.Doc | None]:
    """From the workers' last documents: the errors, whether they are all the Hub's budget
    (transient), and the first disk fault's document."""
    errors: list[str] = []
    transient, disk = True, None
    for i, doc in enumerate(ended):
        if doc["exit"] == 0 and doc.get("state") == "done":
            continue
        if error := doc.get("error"):
            errors.append(error)
        elif doc["exit"] != 0:
            errors.append(f"worker process {i} ended with exit code {doc['exit']} and no error")
        transient = transient and bool(doc.get("transient"))
        disk = disk or doc.get("disk")
    return errors, transient and bool(errors), disk


def run(script: str, manifest: Manifest, args: Namespace, cache: RepoCache, progress: Progress) -> None:
    """The manifest's files over `progress.processes` workers; this process only watches."""
    argv = ["--manifest", args.manifest, "--hf-home", args.hf_home,
            *(["--env-file", args.env_file] if args.env_file else [])]
    log(f"{progress.processes} worker processes")
    workers = Workers(script, argv, Path(args.progress), progress.processes)
    errors, transient, disk = outcome(workers.wait(progress, progress.stop_event.is_set))
    if progress.stop_event.is_set():
        raise DownloadError("stopped by a signal")
    if disk:   # partials stay: a re-run with room resumes them
        raise disk_fault(cache, manifest.files, DiskFault(str(disk["path"]), str(disk["reason"])))
    raise_first(errors, transient)

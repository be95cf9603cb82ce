"""Per-node state files on the laptop, and the cluster lock.

A state file is a record of what k3deploy did, not the truth (the node's facts are): it is
written atomically (tmp + fsync + rename) so a SIGKILL at any moment leaves the old or the new
file, never half of one. Secrets are redacted before anything is written.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path
from types import TracebackType
from typing import NotRequired, TypedDict, cast

from k3deploy.core.errors import LockError
from k3deploy.core.jsonvalue import JSON, JSONable
from k3deploy.core.redact import redact_obj
from k3deploy.core.status import Status

SCHEMA = 1


class StepRecord(TypedDict, total=False):
    """One step's record in a node's state file."""
    status: str              # a Status
    attempts: int
    started: float
    finished: float
    inputs_digest: str
    last_error: str | None
    detail: dict[str, JSON]  # what the step found across nodes (runner.py add_detail)


class TornDown(TypedDict):
    at: float
    logs: str | None         # where the engine's logs went


class StateDoc(TypedDict):
    """A node's state file."""
    schema: int
    node: str
    identity: dict[str, JSON] | None   # node/identity.py: what makes it the same machine
    steps: dict[str, StepRecord]
    discarded_at: NotRequired[float]   # when a new identity discarded the steps
    torn_down: NotRequired[TornDown]


def state_dir_for(inventory_source: str, cluster: str, override: str | None = None) -> Path:
    base = override or os.environ.get("K3DEPLOY_STATE_DIR")
    if base:
        return Path(base) / cluster
    return Path(inventory_source).resolve().parent / ".k3deploy" / cluster


def atomic_write_json(path: Path, data: JSONable, mode: int = 0o600) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


class NodeState:
    def __init__(self, directory: Path, node: str):
        self.path = directory / f"{node}.json"
        self.node = node
        self.data = self._read()
        self.unsaved = False

    def _read(self) -> StateDoc:
        try:
            data = json.loads(self.path.read_text())
        except (FileNotFoundError, ValueError):  # ValueError: bad JSON or not UTF-8
            data = None
        if isinstance(data, dict) and data.get("schema") == SCHEMA \
                and isinstance(data.get("steps"), dict):
            return cast(StateDoc, data)   # the shape this version writes; older ones start afresh
        return {"schema": SCHEMA, "node": self.node, "identity": None, "steps": {}}

    def save(self) -> None:
        # A StateDoc is JSON (str keys; str, number, bool, None, list, dict values), which mypy
        # cannot see of a TypedDict.
        atomic_write_json(self.path, redact_obj(cast(JSON, self.data)))
        self.unsaved = False

    def flush(self) -> None:
        """Writes what `begin` or an "ok" `finish` left in memory. The runner calls it before
        each look at the node and each change, and at the end of the run."""
        if self.unsaved:
            self.save()

    def check_identity(self, identity: dict[str, JSON]) -> bool:
        """Forget everything when the node is another machine now (spot replaced, rebooted
        into a fresh image). Returns True when stale state was discarded."""
        old = self.data.get("identity")
        self.data["identity"] = identity
        self.unsaved = self.unsaved or old != identity
        if old and old != identity:
            self.data["steps"] = {}
            self.data["discarded_at"] = time.time()
            return True
        return False

    def step(self, name: str) -> StepRecord:
        return self.data["steps"].setdefault(name, {"status": Status.NEVER, "attempts": 0})

    def begin(self, name: str, digest: str) -> None:
        """Kept in memory until the step looks at or changes the node (`flush`): a step
        decided from facts already at hand costs no write, and one that hangs on the node
        shows as running."""
        rec = self.step(name)
        rec["status"], rec["started"], rec["inputs_digest"] = Status.RUNNING, time.time(), digest
        rec["attempts"] = rec.get("attempts", 0) + 1
        self.unsaved = True

    def finish(self, name: str, status: Status, *, error: str | None = None,
               detail: dict[str, JSON] | None = None) -> None:
        """A change or a failure is written at once. "ok" (looked, nothing to do) waits for
        the next write: lost in a crash, it is only a look the next run repeats."""
        rec = self.step(name)
        rec["status"], rec["finished"] = status, time.time()
        rec["last_error"] = error
        if detail is not None:
            rec["detail"] = detail
        self.unsaved = True
        if status != Status.OK:
            self.save()

    def add_detail(self, name: str, detail: dict[str, JSON]) -> None:
        """More of a finished step's detail (what it found across nodes); written with the
        run's next write."""
        rec = self.step(name)
        rec["detail"] = {**(rec.get("detail") or {}), **detail}
        self.unsaved = True

    def record_teardown(self, logs: str | None) -> None:
        """When a teardown removed the engine here, and where its logs went. Only a teardown
        that removes something writes it, so a second `down` keeps the first one's record."""
        self.data["torn_down"] = {"at": time.time(), "logs": logs}
        self.save()

    def mark_interrupted(self) -> None:
        """A step still running when the process must exit (Ctrl-C, SIGTERM)."""
        running = [rec for rec in self.data["steps"].values() if rec.get("status") == Status.RUNNING]
        for rec in running:
            rec["status"], rec["finished"] = Status.INTERRUPTED, time.time()
        if running:
            self.save()


class ClusterLock:
    """flock on a file in the cluster's state dir: two runs against one cluster would
    interleave docker restarts and launches. The kernel drops the lock if we are killed."""

    def __init__(self, directory: Path):
        self.path = directory / ".lock"
        self.fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise LockError(f"cluster is locked by {holder} ({self.path})",
                            hint="wait for that run to finish; the lock is released when it "
                            "exits, even if it is killed") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"k3deploy pid {os.getpid()} since {time.strftime('%H:%M:%S')}".encode())
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> ClusterLock:
        self.acquire()
        return self

    def __exit__(self, _kind: type[BaseException] | None, _err: BaseException | None,
                 _tb: TracebackType | None) -> None:
        self.release()

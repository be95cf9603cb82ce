"""DIR/testbed.json: the record of everything a testbed created, so `down` can undo it.

Every resource is recorded *before* it is created, so a crash half-way through `up` still
leaves a record that names it; `down` treats recorded-but-absent resources as already gone.
"""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path

STATE_FILE = "testbed.json"


class TestbedState:
    """The testbed's record, saved atomically after every change (thread-safe within a process)."""

    def __init__(self, tb_dir: Path, data: dict):
        self.dir = Path(tb_dir)
        self.data = data
        self._lock = threading.RLock()

    @classmethod
    def load(cls, tb_dir: Path) -> TestbedState | None:
        path = Path(tb_dir) / STATE_FILE
        if not path.exists():
            return None
        return cls(tb_dir, json.loads(path.read_text()))

    @classmethod
    def create(cls, tb_dir: Path, **fields) -> TestbedState:
        state = cls(tb_dir, {"dir": str(Path(tb_dir).resolve()), "nodes": {}, "iptables": [], **fields})
        state.save()
        return state

    def save(self) -> None:
        with self._lock:
            path = self.dir / STATE_FILE
            tmp = path.with_name(f".{STATE_FILE}.{os.getpid()}.{threading.get_ident()}")
            tmp.write_text(json.dumps(self.data, indent=1, sort_keys=True))
            os.replace(tmp, path)

    def update(self, **fields) -> None:
        with self._lock:
            self.data.update(fields)
            self.save()

    def update_node(self, name: str, /, **fields) -> None:
        with self._lock:
            self.data["nodes"].setdefault(name, {}).update(fields)
            self.save()

    def node(self, name: str) -> dict:
        try:
            return self.data["nodes"][name]
        except KeyError:
            raise KeyError(f"no node named {name!r} in this testbed "
                           f"(nodes: {', '.join(self.data['nodes'])})") from None

    @property
    def idx(self) -> int | None:
        return self.data.get("idx")

    @property
    def bridge(self) -> str | None:
        return self.data.get("bridge")


def process_start_time(pid: int) -> int | None:
    """The kernel's start time of pid (clock ticks since boot), or None if it is gone (or a
    zombie). Recorded next to every pid so a later `down` never kills a recycled pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else int(fields[19])


def same_process(pid: int | None, start_time: int | None) -> bool:
    return bool(pid) and start_time is not None and process_start_time(pid) == start_time

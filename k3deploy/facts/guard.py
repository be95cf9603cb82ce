"""The serve-time guard's own documents on a node, as typed records: its state file (rewritten
every 10 s while it lives), its incident record, and its processes.

The documents are written by remote/guard.py (`write_state`) and remote/guard_record.py
(`failure`, `incident`, `adopt`). A guard of another version may write more or fewer keys:
what is missing takes a neutral value, what is unknown is ignored, so that an old guard can
still be told apart from a healthy one (and replaced) rather than failing the look."""

from __future__ import annotations

from k3deploy.facts.lastjson import json_object
from dataclasses import dataclass

WATCHING = "watching"
FIRED = "fired"      # it recorded an incident and stopped its engine: it never acts again


@dataclass(frozen=True)
class GuardState:
    pid: int | None
    digest: str          # of the config it runs with (node/guard_config.py with_digest)
    beat: float          # time.time() of its last write
    phase: str           # watching | fired


@dataclass(frozen=True)
class Failure:
    """The cluster's first failure, as the guard that saw it named it."""
    node: str
    rank: int | None
    kind: str            # exited | unreachable | not serving | wedged
    cause: str           # for people: "rank 2 (node2): engine exited with code 137"
    at: str              # when it happened (docker's FinishedAt) or was noticed (ISO 8601)


@dataclass(frozen=True)
class Incident:
    failure: Failure | None
    seen_by: str         # the node whose guard saw the failure first
    recorded_at: str     # when this node wrote it (a peer's is adopted): ISO 8601, UTC




def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def parse_state(out: str, code: int) -> GuardState | None:
    """`cat state.json`: None when there is none (no guard ever ran) or it is unreadable."""
    doc = json_object(out, code)
    if doc is None:
        return None
    beat = doc.get("beat")
    return GuardState(pid=_int(doc.get("pid")), digest=_str(doc.get("digest")),
                      beat=float(beat) if isinstance(beat, (int, float)) else 0.0,
                      phase=_str(doc.get("phase")))


def parse_incident(out: str, code: int) -> Incident | None:
    """`cat incident.json`: None when there is none; any object there is an incident on
    record (archived by the guard step), whatever keys it lacks."""
    doc = json_object(out, code)
    if doc is None:
        return None
    return Incident(failure=failure(doc.get("failure")), seen_by=_str(doc.get("seen_by")),
                    recorded_at=_str(doc.get("recorded_at")))


def failure(doc: object) -> Failure | None:
    if not isinstance(doc, dict):
        return None
    return Failure(node=_str(doc.get("node")), rank=_int(doc.get("rank")),
                   kind=_str(doc.get("kind")), cause=_str(doc.get("cause")),
                   at=_str(doc.get("at")))


def parse_pids(out: str, _code: int) -> tuple[int, ...]:
    """Guard processes from `pid ppid` lines. A guard's subprocess.run (docker wait/inspect) is,
    between its fork and exec, a copy with the guard's own command line: a pid whose parent is
    itself a guard is that window, not a second guard."""
    pairs = [(int(a), int(b)) for a, b in (line.split() for line in out.splitlines()
                                           if len(line.split()) == 2)
             if a.isdigit() and b.isdigit()]
    found = {pid for pid, _ in pairs}
    return tuple(pid for pid, ppid in pairs if ppid not in found)

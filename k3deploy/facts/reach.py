"""TCP reach as our two reach programs print it, typed: remote/hub_reach.py's
{"scheme://host:port": true | "why not"} (the Hub and its CDN from a node), and
remote/portcheck.py mesh's {"ports": {port: "listening" | "busy"}, "probes": {"host:port":
true | "why not"}} (every node to every other). Both write a target's reach the same way."""

from __future__ import annotations

from dataclasses import dataclass

from k3deploy.remote.protocol import JSON
from k3deploy.facts.lastjson import last_json_line


@dataclass(frozen=True)
class Reach:
    target: str                  # scheme://host:port (hub_reach) or host:port (mesh)
    why_not: str | None = None   # None: reached

    @property
    def reached(self) -> bool:
        return self.why_not is None


@dataclass(frozen=True)
class Listener:
    port: int
    busy: bool   # something else held the port: the node could not listen on it


@dataclass(frozen=True)
class Mesh:
    """One node's mesh: the ports it listened on, and what it could reach of the others'."""
    listeners: tuple[Listener, ...]
    probes: tuple[Reach, ...]


@dataclass(frozen=True)
class NotRun:
    """The mesh program did not print its answer: python3's exit code and what it said."""
    exit_code: int
    output: tuple[str, ...]


def reaches(doc: dict[str, JSON]) -> tuple[Reach, ...]:
    return tuple(Reach(str(t), None if how is True else str(how)) for t, how in doc.items())


def parse_hub_reach(out: str, code: int) -> tuple[Reach, ...] | None:
    """hub_reach.py's answer; None when it did not run."""
    doc = last_json_line(out) if code == 0 else None
    return reaches(doc) if isinstance(doc, dict) else None


def parse_mesh(out: str) -> Mesh | None:
    """portcheck.py mesh's answer; None when it printed none."""
    doc = last_json_line(out)
    if not isinstance(doc, dict) or not isinstance(doc.get("probes"), dict):
        return None
    ports = doc["ports"] if isinstance(doc.get("ports"), dict) else {}
    return Mesh(tuple(Listener(int(p), how == "busy") for p, how in ports.items()),
                reaches(doc["probes"]))

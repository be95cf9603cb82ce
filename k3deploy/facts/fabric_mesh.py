"""What remote/fabric_mesh.py prints as its last line, typed: {"received": {sender: {"bytes",
"seconds"}}, "sent": {receiver: bytes}, "errors": {peer: text}}, or {"error": text} when it
could not listen. Anything else is the program failing before its answer."""

from __future__ import annotations

from dataclasses import dataclass

from k3deploy.facts.lastjson import last_json_line


@dataclass(frozen=True)
class Received:
    bytes: int
    seconds: float


@dataclass(frozen=True)
class MeshCount:
    """One node's mesh: what it received from each sender, sent to each receiver, and the
    errors of its rounds by peer."""
    received: dict[str, Received]
    sent: dict[str, int]
    errors: dict[str, str]


@dataclass(frozen=True)
class MeshFailed:
    error: str


def parse_answer(out: str) -> MeshCount | MeshFailed | None:
    """The program's answer; None when its last line is not one."""
    doc = last_json_line(out)
    if not isinstance(doc, dict):
        return None
    if "received" in doc:
        return MeshCount({s: Received(int(r["bytes"]), float(r["seconds"]))
                          for s, r in (doc.get("received") or {}).items()},
                         {r: int(b) for r, b in (doc.get("sent") or {}).items()},
                         {p: str(e) for p, e in (doc.get("errors") or {}).items()})
    if "error" in doc:
        return MeshFailed(str(doc["error"]))
    return None

"""What changed between two certificates: launch flags, versions, and latency or throughput
figures that moved by more than 10%. Pure: two documents in, lines out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NotRequired, TypedDict

from k3deploy.core.jsonvalue import JSON

THRESHOLD = 0.10
# Per concurrency level: the figure and whether lower is better (for the wording).
FIGURES = (("ttft_s", "p50", True), ("ttft_s", "p99", True), ("itl_s", "p50", True),
           ("itl_s", "p99", True), ("output_tok_s", None, False),
           ("reasoning_tok_s", None, False), ("per_stream_decode_tok_s", None, False))


class Change(TypedDict):
    kind: str                # flag, config, version, latency
    name: str
    a: JSON
    b: JSON
    change: NotRequired[float]   # latency: relative change from a to b
    better: NotRequired[bool]


def _changes(kind: str, a: Mapping[str, JSON], b: Mapping[str, JSON]) -> list[Change]:
    out: list[Change] = []
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            out.append({"kind": kind, "name": key, "a": a.get(key), "b": b.get(key)})
    return out


def _object(value: JSON) -> dict[str, JSON]:
    """A section of a certificate (certificate.load): {} when it is missing or not one."""
    return value if isinstance(value, dict) else {}


def _number(value: JSON) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _flat_versions(doc: dict[str, JSON]) -> dict[str, JSON]:
    v = _object(doc.get("versions"))
    engine = v.get("engine") or {}
    return {"k3deploy": v.get("k3deploy"), "image": v.get("image"),
            "image_digest": v.get("image_digest"), "engine": engine.get("version")
            if isinstance(engine, dict) else engine}


def moved(a: float | None, b: float | None) -> float | None:
    """Relative change from a to b, or None when either is missing or a is zero."""
    if a is None or b is None or a == 0:
        return None
    return (b - a) / a


def _levels(doc: dict[str, JSON]) -> dict[int, dict[str, JSON]]:
    levels = _object(doc.get("bench")).get("levels") or []
    return {conc: lv for lv in (levels if isinstance(levels, list) else [])
            if isinstance(lv, dict) and isinstance(conc := lv["concurrency"], int)}


def _latency(a: dict[str, JSON], b: dict[str, JSON]) -> list[Change]:
    out: list[Change] = []
    la, lb = _levels(a), _levels(b)
    for conc in sorted(set(la) & set(lb)):
        for key, sub, lower_better in FIGURES:
            va, vb = la[conc].get(key), lb[conc].get(key)
            if sub:
                va, vb = _object(va).get(sub), _object(vb).get(sub)
            change = moved(_number(va), _number(vb))
            if change is not None and abs(change) > THRESHOLD:
                better = (change < 0) == lower_better
                out.append({"kind": "latency", "name": f"{key}{'.' + sub if sub else ''} at "
                            f"{conc} stream(s)", "a": va, "b": vb,
                            "change": round(change, 3), "better": better})
    return out


def diff(a: dict[str, JSON], b: dict[str, JSON]) -> list[Change]:
    la, lb = _object(a.get("launch")), _object(b.get("launch"))
    out = _changes("flag", _object(la.get("flags")), _object(lb.get("flags")))
    if la.get("config_digest") != lb.get("config_digest"):
        out += [{"kind": "config", "name": "launch config digest",
                 "a": la.get("config_digest"), "b": lb.get("config_digest")}]
    out += _changes("version", _flat_versions(a), _flat_versions(b))
    return out + _latency(a, b)


def render(change: Change) -> str:
    name, va, vb = change["name"], change["a"], change["b"]
    if change["kind"] == "flag":
        if va is None:
            return f"flag {name} added: {vb}"
        if vb is None:
            return f"flag {name} removed (was {va})"
    if change["kind"] == "latency":
        word = "better" if change.get("better") else "worse"
        return f"{name}: {va} -> {vb} ({change.get('change', 0.0):+.0%}, {word})"
    return f"{change['kind']} {name}: {va} -> {vb}"

"""What changed between two certificates: launch flags, versions, and latency or throughput
figures that moved by more than 10%. Pure: two documents in, lines out."""

from __future__ import annotations

THRESHOLD = 0.10
# Per concurrency level: the figure and whether lower is better (for the wording).
FIGURES = (("ttft_s", "p50", True), ("ttft_s", "p99", True), ("itl_s", "p50", True),
           ("itl_s", "p99", True), ("output_tok_s", None, False),
           ("reasoning_tok_s", None, False), ("per_stream_decode_tok_s", None, False))


def _changes(kind: str, a: dict, b: dict) -> list[dict]:
    out = []
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            out.append({"kind": kind, "name": key, "a": a.get(key), "b": b.get(key)})
    return out


def _flat_versions(doc: dict) -> dict:
    v = doc.get("versions") or {}
    engine = v.get("engine") or {}
    return {"k3deploy": v.get("k3deploy"), "image": v.get("image"),
            "image_digest": v.get("image_digest"), "engine": engine.get("version")
            if isinstance(engine, dict) else engine}


def moved(a: float | None, b: float | None) -> float | None:
    """Relative change from a to b, or None when either is missing or a is zero."""
    if a is None or b is None or a == 0:
        return None
    return (b - a) / a


def _levels(doc: dict) -> dict[int, dict]:
    return {lv["concurrency"]: lv for lv in ((doc.get("bench") or {}).get("levels") or [])}


def _latency(a: dict, b: dict) -> list[dict]:
    out = []
    la, lb = _levels(a), _levels(b)
    for conc in sorted(set(la) & set(lb)):
        for key, sub, lower_better in FIGURES:
            va, vb = la[conc].get(key), lb[conc].get(key)
            if sub:
                va, vb = (va or {}).get(sub), (vb or {}).get(sub)
            change = moved(va, vb)
            if change is not None and abs(change) > THRESHOLD:
                better = (change < 0) == lower_better
                out.append({"kind": "latency", "name": f"{key}{'.' + sub if sub else ''} at "
                            f"{conc} stream(s)", "a": va, "b": vb,
                            "change": round(change, 3), "better": better})
    return out


def diff(a: dict, b: dict) -> list[dict]:
    la, lb = a.get("launch") or {}, b.get("launch") or {}
    out = _changes("flag", la.get("flags") or {}, lb.get("flags") or {})
    if la.get("config_digest") != lb.get("config_digest"):
        out += [{"kind": "config", "name": "launch config digest",
                 "a": la.get("config_digest"), "b": lb.get("config_digest")}]
    out += _changes("version", _flat_versions(a), _flat_versions(b))
    return out + _latency(a, b)


def render(change: dict) -> str:
    name, va, vb = change["name"], change["a"], change["b"]
    if change["kind"] == "flag":
        if va is None:
            return f"flag {name} added: {vb}"
        if vb is None:
            return f"flag {name} removed (was {va})"
    if change["kind"] == "latency":
        word = "better" if change["better"] else "worse"
        return f"{name}: {va} -> {vb} ({change['change']:+.0%}, {word})"
    return f"{change['kind']} {name}: {va} -> {vb}"

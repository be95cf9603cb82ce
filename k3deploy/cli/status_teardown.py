"""`status` after `down`: the engine steps' old records (launch, wait, verify ok) describe a
cluster that is gone; show when it was torn down and where its logs went instead."""

from __future__ import annotations

import time

from k3deploy.steps import ENGINE_STEPS

TORN_DOWN = "torn down"


def torn_down(state: dict) -> dict | None:
    """The teardown record, unless an engine step ran after it (the cluster is up again)."""
    rec = state.get("torn_down")
    if not rec:
        return None
    later = [s.get("finished") or 0 for name, s in state.get("steps", {}).items()
             if name in ENGINE_STEPS and s.get("status") not in (TORN_DOWN, "never")]
    return {**rec, "when": when(rec["at"])} if rec["at"] > max(later, default=0) else None


def mark(steps: dict, rec: dict | None) -> dict:
    """The engine steps' statuses as torn down when `rec` holds."""
    if not rec:
        return steps
    return {name: ({**r, "status": TORN_DOWN} if name in ENGINE_STEPS else r)
            for name, r in steps.items()}


def when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def note(nodes: dict) -> str | None:
    """'torn down 2026-11-30 17:02:11 UTC, logs in DIR', naming the nodes when not all."""
    down = {n: info["torn_down"] for n, info in nodes.items() if info.get("torn_down")}
    if not down:
        return None
    latest = max(down.values(), key=lambda r: r["at"])
    which = "" if len(down) == len(nodes) else f" on {', '.join(down)}"
    logs = f", logs in {latest['logs']}" if latest.get("logs") else ""
    return f"torn down{which} {latest['when']}{logs}"

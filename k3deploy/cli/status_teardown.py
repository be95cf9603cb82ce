"""How `status` shows a teardown: the engine steps' old records (launch, wait, verify ok)
describe a cluster that is gone; show when it was torn down and where its logs went instead.
Whether a node counts as torn down is cluster_state's decision."""

from __future__ import annotations

import time

from k3deploy.cli import cluster_state
from k3deploy.cli.status_doc import NodeDoc, TornDownView
from k3deploy.core.state import StateDoc, StepRecord


def view(state: StateDoc) -> TornDownView | None:
    """cluster_state.torn_down's record, with a readable time."""
    rec = cluster_state.torn_down(state)
    return {**rec, "when": when(rec["at"])} if rec else None


def mark(steps: dict[str, StepRecord], rec: TornDownView | None) -> dict[str, StepRecord]:
    """The engine steps' statuses as torn down when `rec` holds."""
    if not rec:
        return steps
    return {label: ({**r, "status": cluster_state.TORN_DOWN}
                    if cluster_state.engine_step(label) else r)
            for label, r in steps.items()}


def when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def note(nodes: dict[str, NodeDoc]) -> str | None:
    """'torn down 2026-11-30 17:02:11 UTC, logs in DIR', naming the nodes when not all."""
    down = {n: rec for n, info in nodes.items() if (rec := info.get("torn_down"))}
    if not down:
        return None
    latest = max(down.values(), key=lambda r: r["at"])
    which = "" if len(down) == len(nodes) else f" on {', '.join(down)}"
    logs = f", logs in {latest['logs']}" if latest.get("logs") else ""
    return f"torn down{which} {latest['when']}{logs}"

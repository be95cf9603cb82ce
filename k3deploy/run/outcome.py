"""How a run ended, in one line for the person at the laptop: where it failed (the first step
that failed and on which nodes, what it blocked), or whether it changed anything at all (a
no-op run has nothing to time or certify). Pure: the runner's report in."""

from __future__ import annotations

from k3deploy.run.report import RunReport

FAILED, BLOCKED = "failed", "blocked"


def did_something(report: RunReport) -> bool:
    return "changed" in report.statuses()


def _nodes_with(report: RunReport, step: str, status: str) -> list[str]:
    return [n for n, per in report.results.items() if step in per and per[step].status == status]


def failure_line(report: RunReport) -> str | None:
    """'failed at launch on node2; blocked after it: wait, verify', or for a run whose only
    failures are the problems it found, how many and on which nodes; None: nothing failed."""
    for step in report.steps:
        nodes = _nodes_with(report, step, FAILED)
        if nodes:
            blocked = [s for s in report.steps if _nodes_with(report, s, BLOCKED)]
            after = f"; blocked after it: {', '.join(blocked)}" if blocked else ""
            return f"failed at {step} on {_names(nodes)}{after}"
    found = list(report.problems)
    if found:
        nodes = list(dict.fromkeys(p[0] for p in found))
        return f"failed: {len(found)} problem(s) found on {_names(nodes)}"
    return None


def _names(nodes: list[str]) -> str:
    return ", ".join(nodes) if len(nodes) <= 6 else f"{len(nodes)} nodes ({nodes[0]}, ...)"

"""What an interrupted run tells the user: where it stopped, what keeps running on the nodes
without k3deploy, and how to resume or stop it."""

from __future__ import annotations

from k3deploy.core.status import APPLIED, Status
from k3deploy.run.report import RunReport
from k3deploy.steps import ENGINE_STEPS, TEARDOWN, steps_in

TEARDOWN_STEPS = steps_in(TEARDOWN)


def stopped_at(report: RunReport) -> str | None:
    """The step some node was in when the signal came (else the last one that ran)."""
    reached = [s for s in report.steps if any(s in per for per in report.results.values())]
    hit = [s for s in reached if any(per.get(s) and per[s].status == Status.INTERRUPTED
                                     for per in report.results.values())]
    first = hit or reached
    return first[0] if first else None


def downloading_nodes(report: RunReport) -> list[str]:
    """Nodes where this run started or found the detached downloader and did not see it
    finish (the waiting `download` step not done there)."""
    labels = [s for s in report.steps if s.startswith("download")]
    if not labels:
        return []
    waiting = labels[-1] if labels[-1] == "download" else None
    return [n for n, per in report.results.items()
            if any(s in per for s in labels)
            and not (waiting and per.get(waiting) and per[waiting].status in APPLIED)]


def _teardown_run(report: RunReport) -> bool:
    """Only teardown steps in the run (guard-stop also runs in a bring-up, before the launch)."""
    return all(s.partition("#")[0] in TEARDOWN_STEPS for s in report.steps)


def notes(report: RunReport, inv_source: str) -> list[str]:
    step = stopped_at(report)
    out = [f"stopped{' during ' + step if step else ''}; the state files record it as "
           "interrupted"]
    nodes = downloading_nodes(report)
    if nodes:
        # Polled until the signal: it runs. Started earlier in the run: it may have finished.
        running = "still running" if step == "download" else "may still be running"
        out += [f"{running} on {', '.join(nodes)}: the detached weight downloader (it needs "
                "no k3deploy and stops by itself once every file is verified)",
                f"resume: `k3deploy up -i {inv_source}` or `k3deploy run resume-download -i "
                f"{inv_source}` re-attaches to it (verified files and partial bytes are kept)",
                f"stop it: `k3deploy down -i {inv_source}` (stops the downloader, removes the "
                "containers; --wipe-weights also deletes the weights)"]
    tearing_down = step in TEARDOWN_STEPS and _teardown_run(report)
    if step in ENGINE_STEPS:
        out += [f"the engine containers keep running on the nodes: `k3deploy up -i {inv_source}` "
                f"waits for them again, `k3deploy down -i {inv_source}` removes them"]
    elif step == "image":
        out += ["a `docker pull` that had started may still finish on its node; the next run "
                "skips images that are there"]
    elif tearing_down:
        out += [f"teardown stopped partway: run `k3deploy down -i {inv_source}` again"]
    if not nodes and step not in ENGINE_STEPS and not tearing_down:
        out += ["re-run the same command to continue: every step looks at the node first"]
    return out

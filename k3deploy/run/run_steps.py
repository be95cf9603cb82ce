"""The work behind each CLI command, free of argument parsing."""

from __future__ import annotations

import logging
from collections.abc import Callable

from rich.console import Console

from k3deploy.core import interrupt
from k3deploy.cluster import inventory as inventory_mod
from k3deploy.core import log as klog
from k3deploy.run import playbook as playbook_mod
from k3deploy.node.context import RunContext
from k3deploy.core.errors import Interrupted
from k3deploy.core.status import Status
from k3deploy.run.interrupt_notes import notes
from k3deploy.run.outcome import failure_line
from k3deploy.run.report import RunReport
from k3deploy.run.runner import Runner
from k3deploy.node.session import Session
from k3deploy.steps import step_class
from k3deploy.steps.base import AnyStep
from k3deploy.run.ui import Ui


def run_steps(inv_path: str | inventory_mod.Inventory, steps: list[AnyStep], *, check: bool = False,
              options: dict[str, object] | None = None, accept_new_host_keys: bool = False,
              state_dir: str | None = None, ui: Ui | None = None, summary: bool = True,
              log_json: bool = False,
              after: Callable[[RunContext, RunReport], list[str]] | None = None,
              per_node: bool | None = None) -> RunReport:
    """after(run, report) -> lines: runs inside the session (its connections, no new
    logins) once the steps are done; its lines are shown after the summary. per_node: whether
    the command's goal is per-node work (an unreachable node then makes it partial, exit 3);
    None decides by the steps (all read-only or run-after-failures: per node). inv_path: the
    inventory's file, or one already parsed (a fleet's group, cluster/fleet.py split)."""
    inv = inv_path if isinstance(inv_path, inventory_mod.Inventory) else inventory_mod.load(inv_path)
    # --log-json: stderr carries JSON lines only; the runner's events stand in for the Ui's text.
    ui = ui or Ui(console=Console(stderr=True, quiet=True) if log_json else None)
    options = {**(options or {}), "log_json": log_json}
    with interrupt.handling(), Session(inv, accept_new_host_keys=accept_new_host_keys,
                                      state_dir=state_dir) as session:
        interrupt.at_forced_exit(lambda: _mark_interrupted(session))
        run = RunContext(inv=inv, session=session, check=check, options=options, ui=ui)
        runner = Runner(run, steps)
        if per_node is not None:
            runner.report.partial_ok = per_node
        report = runner.execute()
        klog.get().log(logging.INFO if log_json else logging.DEBUG, "run.ssh",
                       nodes={n: c.stats() for n, c in session.connections.items()})
        signum = interrupt.signum()
        closing = after(run, report) if after and not signum else []
    if report.problems:
        ui.problems(report.problems, changed=Status.CHANGED in report.statuses())
    if summary:
        ui.summary(report)
    failed = None if signum else failure_line(report)
    if failed:
        ui.say(failed, wrap=False)
    for line in closing:
        ui.say(line, wrap=False)
        if log_json:
            klog.get().info("run.note", text=line)
    if report.unreachable_nodes() and not report.partial_ok:
        ui.say(f"not finished: {', '.join(report.unreachable_nodes())} could not be reached; "
               "bring it back or replace it in the inventory, then re-run")
    stopped = Interrupted(signum, notes(report, inv.source)) if signum else None
    if log_json:
        _log_report(report, stopped.exit_code if stopped else report.exit_code())
    if stopped:
        raise stopped
    return report


def _mark_interrupted(session: Session) -> None:
    for state in session.states.values():
        state.mark_interrupted()


def _log_report(report: RunReport, exit_code: int) -> None:
    log = klog.get()
    for node, check, message in report.problems:
        log.info("run.problem", node=node, check=check, problem=message)
    log.info("run.finished", exit_code=exit_code,
             nodes={n: {s: r.status for s, r in per.items()} for n, per in report.results.items()})


def playbook_steps(name: str) -> list[AnyStep]:
    return playbook_mod.load(name)[1]


def single(step_name: str, **params: object) -> list[AnyStep]:
    return [step_class(step_name)(params or None)]

"""The work behind each CLI command, free of argument parsing."""

from __future__ import annotations

from k3deploy import inventory as inventory_mod
from k3deploy import playbook as playbook_mod
from k3deploy.context import RunContext
from k3deploy.runner import Runner, RunReport
from k3deploy.session import Session
from k3deploy.steps import step_class
from k3deploy.ui import Ui


def run_steps(inv_path: str, steps, *, check: bool = False, options: dict | None = None,
              accept_new_host_keys: bool = False, state_dir: str | None = None,
              ui: Ui | None = None, summary: bool = True) -> RunReport:
    inv = inventory_mod.load(inv_path)
    ui = ui or Ui()
    with Session(inv, accept_new_host_keys=accept_new_host_keys, state_dir=state_dir) as session:
        run = RunContext(inv=inv, session=session, check=check, options=options or {}, ui=ui)
        report = Runner(run, steps).execute()
    if report.problems:
        ui.problems(report.problems)
    if summary:
        ui.summary(report)
    return report


def playbook_steps(name: str):
    return playbook_mod.load(name)[1]


def single(step_name: str, **params):
    return [step_class(step_name)(params or None)]

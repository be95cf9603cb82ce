"""Step names are derived from the step registry (steps/__init__.py), not kept in lists that go
stale: every registered step has a phase, status shows it, and an interrupted run's notes say
something about it; the playbooks name only registered steps."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from k3deploy import steps
from k3deploy.cli import status_cmd
from k3deploy.run import interrupt_notes
from k3deploy.run.report import RunReport, StepResult

PLAYBOOKS = Path(steps.__file__).resolve().parents[1] / "playbooks"


def _names(playbook: Path) -> list[str]:
    return [s if isinstance(s, str) else s["step"] for s in yaml.safe_load(playbook.read_text())["steps"]]


def test_every_registered_step_has_a_phase_and_loads():
    phases = [steps.steps_in(p) for p in (steps.BRINGUP, steps.TEARDOWN, steps.ANY)]
    assert sorted(n for names in phases for n in names) == sorted(steps.REGISTRY)
    for name in steps.REGISTRY:
        assert steps.step_class(name).name == name


def test_status_shows_every_bring_up_and_teardown_step():
    playbook_steps = {n for p in PLAYBOOKS.glob("*.yaml") for n in _names(p)}
    assert playbook_steps <= set(steps.REGISTRY)
    assert set(status_cmd.STEPS) == set(steps.REGISTRY) - set(steps.steps_in(steps.ANY))
    assert playbook_steps <= set(status_cmd.STEPS)


@pytest.mark.parametrize("step", sorted(steps.REGISTRY))
def test_an_interrupted_run_has_notes_for_every_step(step):
    # a teardown step in the teardown playbook, where its note matters most
    books = sorted(PLAYBOOKS.glob("*.yaml"), key=lambda p: (p.stem != "teardown", p.stem))
    playbook = next((p for p in books if step in _names(p)), None)
    labels = _names(playbook) if playbook else [step]
    report = RunReport(labels)
    report.set("node0", step, StepResult("interrupted"))
    lines = interrupt_notes.notes(report, "inv.yaml")
    assert lines[0].startswith(f"stopped during {step}") and len(lines) > 1
    if playbook and playbook.stem == "teardown":
        assert "teardown stopped partway" in lines[1]

"""Step statuses are one enum (core/status.py): the strings in state files and --json are
unchanged, the runner uses no bare status string, and the two sets that were both called DONE
are named for what they hold."""

from __future__ import annotations

import json
import re
from pathlib import Path

from k3deploy.core.state import NodeState
from k3deploy.core.status import APPLIED, NOT_THROUGH, SETTLED, Status
from k3deploy.run import ui

RUN = Path(__file__).resolve().parents[2] / "k3deploy" / "run"


def test_the_strings_on_disk_and_in_json_are_the_old_ones(tmp_path):
    assert json.dumps({"s": Status.WOULD_CHANGE}) == '{"s": "would-change"}'
    state = NodeState(tmp_path, "node0")
    state.begin("launch", "d")
    state.finish("launch", Status.CHANGED)
    saved = json.loads(next(tmp_path.rglob("*.json")).read_text())
    assert saved["steps"]["launch"]["status"] == "changed"
    assert NodeState(tmp_path, "node0").step("launch")["status"] == Status.CHANGED


def test_the_sets_say_what_they_hold():
    assert APPLIED < SETTLED and Status.WOULD_CHANGE in SETTLED - APPLIED
    assert not NOT_THROUGH & SETTLED


def test_the_runner_reports_only_enum_statuses_and_the_ui_styles_each():
    source = "".join(p.read_text() for p in RUN.glob("*.py"))
    assert not re.findall(r'StepResult\("', source)
    reported = {Status[name] for name in re.findall(r"StepResult\(Status\.(\w+)", source)}
    assert reported and reported <= set(ui.STYLE)

"""How a run ends: a failure says where; a bring-up that changed nothing says so, is not
timed, and keeps the certificate it found; one that changed something is timed and certified."""

from __future__ import annotations

import types

from k3deploy.cli import status_view, up_close
from k3deploy.run import outcome
from k3deploy.run.report import RunReport, StepResult
from k3deploy.serving import certificate

STEPS = ["preflight", "download", "launch", "wait"]


def report(statuses: dict[str, list[str]], problems=()) -> RunReport:
    rep = RunReport(steps=STEPS, problems=list(problems))
    for node, per in statuses.items():
        for step, status in zip(STEPS, per):
            rep.set(node, step, StepResult(status))
    return rep


def test_a_failure_says_which_step_on_which_nodes_and_what_it_blocked():
    rep = report({"node0": ["ok", "changed", "failed", "blocked"],
                  "node1": ["ok", "ok", "failed", "blocked"]})
    assert outcome.failure_line(rep) == "failed at launch on node0, node1; blocked after it: wait"
    checked = RunReport(steps=["preflight"], problems=[("node1", "disk", "full"),
                                                       ("node1", "gpu", "lost")])
    checked.set("node1", "preflight", StepResult("ok"))
    assert outcome.failure_line(checked) == "failed: 2 problem(s) found on node1"
    assert outcome.failure_line(report({"node0": ["ok"] * 4})) is None


def test_did_something():
    assert not outcome.did_something(report({"node0": ["ok"] * 4}))
    assert outcome.did_something(report({"node0": ["ok", "changed", "ok", "ok"]}))


def _run(tmp_path):
    inv = types.SimpleNamespace(price=None, nodes=[1], gpu=types.SimpleNamespace(count=8))
    return types.SimpleNamespace(check=False, inv=inv,
                                 session=types.SimpleNamespace(state_dir=tmp_path))


def test_a_no_op_up_keeps_the_certificate_and_is_not_timed(tmp_path):
    kept = certificate.write(tmp_path, {"schema": 1}, now=0)
    later = certificate.write(tmp_path, {"schema": 1}, now=0)    # same second: -1
    assert later.name.endswith("-1.json") and certificate.latest(tmp_path) == later
    lines = up_close.closing_for()(_run(tmp_path), report({"node0": ["ok"] * 4}))
    assert lines == [f"nothing to do: every step was already done on every node; the "
                     f"certificate stays {later}"]
    assert sorted(certificate.directory(tmp_path).iterdir()) == sorted([kept, later])


def test_a_failed_up_is_not_timed_nor_certified(tmp_path):
    rep = report({"node0": ["ok", "changed", "failed", "blocked"]})
    assert up_close.closing_for()(_run(tmp_path), rep) == []
    assert certificate.latest(tmp_path) is None


def test_long_node_names_keep_both_ends():
    assert status_view._clip_middle("a-very-long-cluster-worker-name-17", 20) == \
        "a-very-lo…er-name-17"

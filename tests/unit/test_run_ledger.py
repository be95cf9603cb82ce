"""The run's ledger: what the executor ran for a step, as it returned, and the decisions the
runner kept; a failed action is not recorded as done."""

import threading
from types import SimpleNamespace

import pytest

from k3deploy.core.errors import CommandError
from k3deploy.node.executor import Executor
from k3deploy.node.run_ledger import RunLedger
from k3deploy.steps.base import Action, Step
from tests.unit.fakes import FakeConn


class Failing(FakeConn):
    def respond(self, command):
        return (1, "no") if command.startswith("false") else (0, "")


def node(name="node0"):
    run = SimpleNamespace(executor=Executor(), ledger=RunLedger())
    return SimpleNamespace(conn=Failing(name), name=name, run=run)


def test_tagged_actions_are_recorded_as_they_return_with_their_note():
    n, step = node(), Step()
    step.apply(n, [Action("start", ("true",), tag="start-x", note={"incident": 3}),
                   Action("plain", ("true",)),
                   Action("again", ("true",), tag="start-x")])
    ledger = n.run.ledger
    assert ledger.count("node0", "start-x") == 2 and ledger.count("node0", "plain") == 0
    first, last = ledger.all("node0", "start-x")
    assert first.note == {"incident": 3} and first.at <= last.at and last.note is None
    assert ledger.notes("start-x") == {"node0": None}
    assert ledger.last("node1", "start-x") is None


def test_an_action_that_failed_is_not_recorded():
    n = node()
    with pytest.raises(CommandError):
        Step().apply(n, [Action("fails", ("false",), tag="start-x")])
    assert n.run.ledger.count("node0", "start-x") == 0
    Step().apply(n, [Action("tolerated", ("false",), tag="start-x", check=False)])
    assert n.run.ledger.count("node0", "start-x") == 1


def test_records_are_kept_per_node_and_step_from_many_threads():
    ledger = RunLedger()
    threads = [threading.Thread(target=lambda i=i: [ledger.record(f"node{i % 4}", "s", "t")
                                                    for _ in range(250)]) for i in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert [ledger.count(f"node{i}", "t") for i in range(4)] == [500] * 4
    assert ledger.count("node0", "t", step="other") == 0


def test_one_decision_per_kind_the_last_holds():
    ledger = RunLedger()
    assert ledger.decided(dict) is None
    ledger.decide({"whole": True})
    ledger.decide({"whole": False})
    ledger.decide(["not", "a", "dict"])
    assert ledger.decided(dict) == {"whole": False} and ledger.decided(list) == ["not", "a", "dict"]

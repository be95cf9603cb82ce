"""`status` after `down`: the cluster shows as torn down, and a second down keeps the record."""

import json

from k3deploy.cluster import inventory
from k3deploy.cli import cluster_state, status_teardown
from k3deploy.node.context import RunContext
from k3deploy.node.run_inputs import RunInputs
from k3deploy.run.runner import Runner
from k3deploy.steps.teardown import RemoveContainers
from tests.unit.fakes import FakeConn, FakeSession, section
from tests.unit.docker_facts import container
from tests.unit.invdata import four_nodes

CONTAINER = [{"State": {"Status": "running", "Running": True}, "Config": {"Image": "x"}}]


class EngineConn(FakeConn):
    """A node with an engine container until `docker rm` removes it."""

    def __init__(self, name):
        super().__init__(name)
        self.container = True

    def respond(self, command):
        if "docker rm" in command:
            self.container = False
            return 0, ""
        found = json.dumps(CONTAINER) if self.container else ""
        return 0, section(command, "container", found, 0 if self.container else 1)


def test_only_a_teardown_that_removes_something_writes_the_record(tmp_path):
    inv = inventory.parse(four_nodes())
    session = FakeSession(inv, tmp_path, {n.name: EngineConn(n.name) for n in inv.nodes})
    run = RunContext(inv=inv, session=session, inputs=RunInputs(logs_dir=tmp_path / "logs"))
    first = Runner(run, [RemoveContainers()]).execute()
    assert {r["teardown"].status for r in first.results.values()} == {"changed"}
    records = {n: s.data["torn_down"] for n, s in session.states.items()}
    assert all(r["logs"] == str(tmp_path / "logs") for r in records.values())

    again = Runner(run, [RemoveContainers()]).execute()
    assert {r["teardown"].status for r in again.results.values()} == {"ok"}
    assert {n: s.data["torn_down"] for n, s in session.states.items()} == records


def state(launched: float, down_at: float | None) -> dict:
    steps = {"download": {"status": "ok", "finished": launched - 50},
             "launch": {"status": "changed", "finished": launched},
             "wait": {"status": "ok", "finished": launched + 1},
             "verify": {"status": "ok", "finished": launched + 2}}
    doc = {"steps": steps}
    if down_at:
        doc["torn_down"] = {"at": down_at, "logs": "/l"}
    return doc


def test_engine_steps_show_torn_down_until_a_later_launch():
    doc = state(launched=1000, down_at=2000)
    rec = status_teardown.view(doc)
    assert rec["when"] == "1970-01-01 00:33:20 UTC"
    marked = status_teardown.mark(doc["steps"], rec)
    assert {s: r["status"] for s, r in marked.items()} == {
        "download": "ok", "launch": "torn down", "wait": "torn down", "verify": "torn down"}
    assert status_teardown.view(state(launched=3000, down_at=2000)) is None  # up again
    assert status_teardown.view(state(launched=1000, down_at=None)) is None
    assert status_teardown.mark(doc["steps"], None) == doc["steps"]


def test_note_names_the_nodes_when_not_all_were_torn_down():
    rec = status_teardown.view(state(1000, 2000))
    assert status_teardown.note({"a": {"torn_down": rec}, "b": {"torn_down": rec}}) == \
        "torn down 1970-01-01 00:33:20 UTC, logs in /l"
    assert status_teardown.note({"a": {"torn_down": rec}, "b": {"torn_down": None}}) == \
        "torn down on a 1970-01-01 00:33:20 UTC, logs in /l"
    assert status_teardown.note({"a": {"torn_down": None}}) is None


def test_down_is_decided_in_cluster_state_for_both_views():
    # recorded: the teardown record, as long as no engine step (by label) finished after it
    doc = state(launched=1000, down_at=2000)
    assert cluster_state.torn_down(doc) == {"at": 2000, "logs": "/l"}
    doc["steps"]["verify#2"] = {"status": "ok", "finished": 2500}
    assert cluster_state.torn_down(doc) is None
    doc["steps"]["verify#2"]["status"] = "torn down"   # an old record already marked
    assert cluster_state.torn_down(doc) is not None
    assert cluster_state.engine_step("launch") and not cluster_state.engine_step("download")
    # live: no rank's engine runs
    lives = {"a": {"reachable": True, "container": None},
             "b": {"reachable": True, "container": container(False)}}
    assert cluster_state.summarize(lives)["state"] == cluster_state.DOWN

"""The step contract as the runner enforces it, against in-memory nodes."""

from types import SimpleNamespace

from k3deploy.cluster import inventory
from k3deploy.node.context import RunContext
from k3deploy.node.executor import Executor
from k3deploy.node.run_ledger import RunLedger
from k3deploy.core.errors import EXIT_OK, EXIT_PARTIAL, EXIT_STEP_FAILED, StepFailed
from k3deploy.run.runner import Runner
from k3deploy.steps.base import Step, cmd
from tests.unit.fakes import FakeConn, FakeSession
from tests.unit.invdata import four_nodes

WORLD: dict = {}


class Touch(Step):
    """A step over an in-memory world: a node needs 'x' set; applying sets it."""

    name = "touch"
    order: list = []

    def observe(self, found, node):   # the in-memory world stands in for the node
        return {"x": WORLD.get(node.name)}

    def plan(self, facts, node):
        return [] if facts["x"] else [cmd("set x", "touch", "/x")]

    def apply(self, node, actions):
        Touch.order.append(node.name)
        if node.name != WORLD.get("broken"):
            WORLD[node.name] = True


class HeadFirst(Touch):
    name = "headfirst"
    head_first = True


class NeedsAll(Touch):
    name = "needsall"
    needs_all_nodes = True


def make(tmp_path, check=False, conns=None):
    inv = inventory.parse(four_nodes())
    session = FakeSession(inv, tmp_path, conns)
    return RunContext(inv=inv, session=session, check=check), session


def setup_function():
    WORLD.clear()
    Touch.order = []


def test_check_mode_reports_and_touches_nothing(tmp_path):
    run, session = make(tmp_path, check=True)
    report = Runner(run, [Touch()]).execute()
    assert {r["touch"].status for r in report.results.values()} == {"would-change"}
    assert report.results["node0"]["touch"].actions == ["set x: touch /x"]
    assert WORLD == {} and Touch.order == []
    assert report.exit_code() == EXIT_OK
    assert not session.states["node0"].path.exists()


def test_apply_then_apply_again_changes_nothing(tmp_path):
    run, session = make(tmp_path)
    first = Runner(run, [Touch()]).execute()
    assert {r["touch"].status for r in first.results.values()} == {"changed"}
    again = Runner(run, [Touch()]).execute()
    assert {r["touch"].status for r in again.results.values()} == {"ok"}
    rec = session.states["node2"].step("touch")
    assert rec["status"] == "ok" and rec["attempts"] == 2 and rec["inputs_digest"]


def test_apply_that_does_not_converge_fails_that_node_only(tmp_path):
    WORLD["broken"] = "node1"
    run, session = make(tmp_path)
    report = Runner(run, [Touch()]).execute()
    assert report.results["node1"]["touch"].status == "failed"
    assert "still needed: set x: touch /x" in report.results["node1"]["touch"].error[0]
    assert report.results["node0"]["touch"].status == "changed"
    assert report.exit_code() == EXIT_STEP_FAILED
    assert "still needed" in session.states["node1"].step("touch")["last_error"]


def test_needs_all_nodes_blocks_after_a_failure(tmp_path):
    WORLD["broken"] = "node3"
    run, _ = make(tmp_path)
    report = Runner(run, [Touch(), NeedsAll()]).execute()
    blocked = report.results["node0"]["needsall"]
    assert blocked.status == "blocked" and "node3 failed earlier" in blocked.error[0]


def test_head_first_runs_rank_zero_alone_first(tmp_path):
    run, _ = make(tmp_path)
    Runner(run, [HeadFirst()]).execute()
    assert Touch.order[0] == "node0" and sorted(Touch.order[1:]) == ["node1", "node2", "node3"]


def node2_unreachable(tmp_path):
    inv = inventory.parse(four_nodes())
    conns = {n.name: FakeConn(n.name, unreachable=n.name == "node2") for n in inv.nodes}
    return make(tmp_path, conns=conns)[0]


def test_unreachable_node_is_reported_and_others_finish(tmp_path):
    report = Runner(node2_unreachable(tmp_path), [Touch()]).execute()
    assert report.results["node2"]["touch"].status == "unreachable"
    assert "cannot reach it" in report.results["node2"]["touch"].error[0]
    assert report.results["node1"]["touch"].status == "changed"
    # Touch is a step toward a goal that needs every node: losing one is a failure, not partial.
    assert report.exit_code() == EXIT_STEP_FAILED and report.unreachable_nodes() == ["node2"]


class Sweep(Touch):
    name = "sweep"
    runs_after_failures = True  # per-node work, as teardown: done where reachable


def test_unreachable_node_in_per_node_work_is_partial(tmp_path):
    report = Runner(node2_unreachable(tmp_path), [Sweep()]).execute()
    assert report.results["node1"]["sweep"].status == "changed"
    assert report.exit_code() == EXIT_PARTIAL


class Look(Touch):
    """Read-only, as preflight: a node it could not look at is a problem row."""

    name = "look"
    read_only = True

    def plan(self, facts, node):
        return []

    def cluster_problems(self, all_facts, run):
        return [(n.name, "reachable", "could not be checked") for n in run.inv.nodes
                if n.name not in all_facts]


def test_check_with_an_unreachable_node_is_partial_not_failed(tmp_path):
    report = Runner(node2_unreachable(tmp_path), [Look()]).execute()
    assert report.problems == [("node2", "reachable", "could not be checked")]
    assert report.exit_code() == EXIT_PARTIAL
    report.problems.append(("node1", "disk", "too small"))  # a real finding still fails
    assert report.exit_code() == EXIT_STEP_FAILED


def test_replaced_machine_discards_stale_state(tmp_path):
    run, session = make(tmp_path)
    Runner(run, [Touch()]).execute()
    assert session.states["node1"].step("touch")["status"] == "changed"
    session.connections["node1"].boot_id = "boot-2"
    WORLD.pop("node1")
    Runner(run, [Touch()]).execute()
    rec = session.states["node1"].step("touch")
    assert rec["attempts"] == 1 and session.states["node1"].data.get("discarded_at")


def test_step_failed_error_names_node_and_step(tmp_path):
    class Boom(Touch):
        name = "boom"

        def plan(self, facts, node):
            raise StepFailed(node.name, "no good", hint="do better")

    run, _ = make(tmp_path)
    report = Runner(run, [Boom()]).execute()
    assert report.results["node0"]["boom"].error == ["[node0/boom] no good", "  fix: do better"]


def test_playbook_gives_repeated_steps_unique_labels(tmp_path):
    from k3deploy.run import playbook
    path = tmp_path / "pb.yaml"
    path.write_text("steps:\n  - {step: file, with: {path: /a, content: x}}\n"
                    "  - {step: file, with: {path: /b, content: y}}\n  - download\n"
                    "  - {step: download, with: {wait: false}}\n")
    name, steps = playbook.load(str(path))
    assert name == "pb"
    assert [s.label for s in steps] == ["file", "file#2", "download", "download-start"]


class OneByOne(Touch):
    """As ray-cluster: the head, then each other node alone (raylets registering at once can
    leave one out, ray-project/ray#59778): the runner orders them, no lock in the step."""

    name = "onebyone"
    head_first = True
    one_by_one = True
    inside: list = []

    def apply(self, node, actions):
        OneByOne.inside.append(node.name)
        assert len(OneByOne.inside) == 1, OneByOne.inside   # nobody else is applying now
        super().apply(node, actions)
        OneByOne.inside.remove(node.name)


def test_one_by_one_runs_the_head_then_each_node_alone(tmp_path):
    run, _ = make(tmp_path)
    report = Runner(run, [OneByOne()]).execute()
    assert {r["onebyone"].status for r in report.results.values()} == {"changed"}
    assert Touch.order == ["node0", "node1", "node2", "node3"]


def test_one_by_one_stops_when_the_head_fails_and_goes_on_past_a_failed_node(tmp_path):
    run, _ = make(tmp_path)
    WORLD["broken"] = "node0"
    Runner(run, [OneByOne()]).execute()
    assert Touch.order == ["node0"]
    WORLD.clear()
    Touch.order = []
    WORLD["broken"] = "node2"
    report = Runner(run, [OneByOne()]).execute()
    assert Touch.order == ["node0", "node1", "node2", "node3"]
    assert report.results["node2"]["onebyone"].status == "failed"
    assert report.results["node3"]["onebyone"].status == "changed"


def test_uploads_in_a_row_go_in_one_round_trip_in_the_run_order(tmp_path):
    """Seventeen uploads in a row were seventeen round trips (a WAN round trip each from a
    laptop): a run of uploads sharing sudo is one put_texts; a command between them splits it."""
    from k3deploy.steps.base import take_uploads, upload
    actions = [upload("a", "/w/a", "1"), upload("b", "/w/b", "2"), cmd("start", "true"),
               upload("c", "/w/c", "3"), upload("d", "/etc/d", "4", sudo=True)]
    assert [a.description for a in take_uploads(list(actions))] == ["a", "b"]
    conn = FakeConn("node0")
    run = SimpleNamespace(executor=Executor(), ledger=RunLedger())
    node = SimpleNamespace(conn=conn, name="node0", run=run)
    Step().apply(node, actions)
    assert conn.upload_batches == [["/w/a", "/w/b"], ["/w/c"], ["/etc/d"]]
    assert conn.commands == ["true"]
    assert conn.uploads == {"/w/a": "1", "/w/b": "2", "/w/c": "3", "/etc/d": "4"}

"""The port mesh runs before a launch; a cluster that serves is not probed again (its ranks
reached each other), but a group whose head does not answer is (NCCL and Gloo hang on a partly
open TCP range: containers run, the endpoint never answers). Facts in; the mesh commands the
fake connections receive out."""

import json

from k3deploy.cluster import inventory
from k3deploy.node.context import NodeContext, RunContext
from k3deploy.node.run_inputs import RunInputs
from k3deploy.steps.preflight import Preflight
from k3deploy.steps.reachability import NOT_PROBED, reachability_problems
from tests.unit.fakes import FakeConn, FakeSession
from tests.unit.invdata import four_nodes

RUNNING = {"State": {"Running": True, "Status": "running"}, "Config": {"Labels": {}}}
EXITED = {"State": {"Running": False, "Status": "exited", "ExitCode": 1}, "Config": {}}


class MeshConn(FakeConn):
    """Answers the mesh as a node whose probes all got through."""

    def respond(self, command):
        if "mesh" not in command:
            return 0, ""
        return 0, json.dumps({"ports": {}, "probes": {}})


def run_ctx(tmp_path):
    inv = inventory.parse(four_nodes())
    conns = {n.name: MeshConn(n.name) for n in inv.nodes}
    run = RunContext(inv=inv, session=FakeSession(inv, tmp_path, conns),
                     inputs=RunInputs(api_key="k3-key", token_read=True))
    return run, conns


def facts(run, container=RUNNING, health=200):
    head = run.inv.head.name
    out = {n.name: {"hub_client": "1.0", "ports_in_use": set(), "container": container}
           for n in run.inv.nodes}
    out[head]["serving"] = {"health": {"status": health}} if health else None
    return out


def meshes(conns) -> int:
    return sum("mesh" in c for conn in conns.values() for c in conn.commands)


def test_a_serving_cluster_is_not_probed(tmp_path):
    run, conns = run_ctx(tmp_path)
    assert reachability_problems(run, facts(run)) == []
    assert meshes(conns) == 0


def test_running_containers_whose_head_does_not_answer_are_probed(tmp_path):
    run, conns = run_ctx(tmp_path)
    for health in (503, None):   # hung group; nothing listening at all
        reachability_problems(run, facts(run, health=health))
    assert meshes(conns) == 2 * len(run.inv.nodes)


def test_a_rank_whose_container_exited_means_the_mesh_runs(tmp_path):
    run, conns = run_ctx(tmp_path)
    found = facts(run)
    found[run.inv.nodes[-1].name]["container"] = EXITED
    reachability_problems(run, found)
    assert meshes(conns) == len(run.inv.nodes)


def test_an_unreached_node_means_the_mesh_runs_on_the_others(tmp_path):
    run, conns = run_ctx(tmp_path)
    found = facts(run)
    gone = run.inv.nodes[-1].name
    del found[gone]
    reachability_problems(run, found)
    assert meshes(conns) == len(run.inv.nodes) - 1 and not conns[gone].commands


def test_preflight_asks_the_head_for_health_with_the_endpoint_key(tmp_path):
    run, _ = run_ctx(tmp_path)
    head, worker = (NodeContext(run, node, rank) for rank, node in run.inv.ranked()[:2])
    names = [f.name for f in Preflight().probes(head)]
    assert "container" in names and "serving" in names
    serving = next(f for f in Preflight().probes(head) if f.name == "serving")
    assert json.loads(serving.stdin)["checks"] == ["health"]
    assert json.loads(serving.stdin)["key"] == "k3-key"   # on stdin, never in the script
    assert "k3-key" not in serving.script
    assert "serving" not in [f.name for f in Preflight().probes(worker)]


def test_preflight_says_when_it_left_the_ports_unprobed(tmp_path):
    run, conns = run_ctx(tmp_path)
    step = Preflight()
    step.cluster_problems(facts(run), run)
    assert step.closing_lines(run) == [NOT_PROBED] and meshes(conns) == 0
    step.cluster_problems(facts(run, health=503), run)
    assert step.closing_lines(run) == [] and meshes(conns) == len(run.inv.nodes)


def test_the_mesh_program_goes_on_stdin_and_its_argv_stays_small(tmp_path):
    # every `ps` on a node shows argv: the 7.6 KB program with its docstring must not be there
    run, conns = run_ctx(tmp_path)
    reachability_problems(run, facts(run, health=None))
    for conn in conns.values():
        (command,) = [c for c in conn.commands if "mesh" in c]
        assert command.startswith("python3 - mesh ") and len(command) < 400, command
        assert '"""' not in command and "import" not in command

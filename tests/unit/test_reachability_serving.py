"""The port mesh runs before a launch; a cluster that serves is not probed again (its ranks
reached each other), but a group whose head does not answer is (NCCL and Gloo hang on a partly
open TCP range: containers run, the endpoint never answers). Facts in; the mesh commands the
fake connections receive out, run by the runner's cluster look (run/cluster_look.py).

Preflight's own hooks (plan, problems, cluster_probes, cluster_problems, closing_lines) touch no
connection: the test with a connection that raises on any use says so."""

import dataclasses
import json
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from k3deploy.cluster import inventory
from k3deploy.core.errors import K3Error
from k3deploy.facts import http
from k3deploy.facts.docker import Container
from k3deploy.facts.reach import Mesh, NotRun
from k3deploy.node.context import NodeContext, RunContext
from k3deploy.node.run_inputs import RunInputs
from k3deploy.run.cluster_look import look_across
from k3deploy.steps.checks.preflight import Preflight
from k3deploy.steps.checks import reachability
from k3deploy.steps.checks.reachability import MESH, NOT_PROBED, mesh_probes
from tests.unit.docker_facts import container
from tests.unit.fakes import FakeConn, FakeSession
from tests.unit.invdata import four_nodes
from tests.unit.typed import facts as typed_facts
from tests.unit.test_step_fixtures import manifest

RUNNING = container()
EXITED = container(False, exit_code=1)


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
                     inputs=RunInputs(api_key="k3-key", settled=frozenset({"token"})))
    return run, conns


@dataclass(frozen=True)
class Seen:
    """What the mesh reads of a node's facts (reachability.Found): preflight's fields."""
    hub_client: str | None
    ports_in_use: frozenset[int]
    container: Container | None
    serving: http.Endpoint | None = None
    mesh: Mesh | NotRun | K3Error | None = None


class MeshStep:
    """Preflight's share of the cluster hooks: the mesh, and what it found."""
    name = "preflight"

    def cluster_probes(self, all_facts, run):
        return mesh_probes(run, all_facts)

    def cluster_problems(self, all_facts, run):
        return reachability.reachability_problems(run, all_facts)


def facts(run, engine=RUNNING, health=200):
    """health None: the head's /health got no answer (nothing listens)."""
    head = run.inv.head.name
    out = {n.name: Seen("1.0", frozenset(), engine) for n in run.inv.nodes}
    out[head] = dataclasses.replace(out[head], serving=http.Endpoint(health=http.Answer(health)))
    return out


def reachability_problems(run, found):
    """What preflight reports on the ports after the runner ran its cluster probes."""
    step = MeshStep()
    looked = look_across(step, found, {n: SimpleNamespace(conn=c)
                                       for n, c in run.session.connections.items()}, run)
    return [p for p in step.cluster_problems(looked, run) if p[1] == "ports"]


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
    last = run.inv.nodes[-1].name
    found[last] = dataclasses.replace(found[last], container=EXITED)
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


def preflight_facts(run, health, **values) -> dict:
    """Preflight's typed facts on every node, as a real look gives them: each probe's parse of
    a command that printed nothing and failed, unless given; the head's /health answering
    `health`."""
    out = {}
    for rank, node in run.inv.ranked():
        ctx = NodeContext(run, node, rank)
        doc = {f.name: f.parse("", 255) for f in Preflight().probes(ctx)}
        doc.update(hub_client="1.0", ports_in_use=frozenset(), container=RUNNING, **values)
        if ctx.is_head:
            doc["serving"] = http.Endpoint(health=http.Answer(health))
        out[node.name] = typed_facts(Preflight, doc)
    return out


def test_preflight_says_when_it_left_the_ports_unprobed(tmp_path):
    run, conns = run_ctx(tmp_path)
    step = Preflight()
    assert step.closing_lines(run, preflight_facts(run, 200)) == [NOT_PROBED]
    assert step.cluster_probes(preflight_facts(run, 200), run) == {}
    assert step.closing_lines(run, preflight_facts(run, 503)) == []
    assert set(step.cluster_probes(preflight_facts(run, 503), run)) == set(conns)


class Untouchable(FakeConn):
    def run(self, *args, **kwargs):
        raise AssertionError(f"{self.name}: a pure hook used the connection")

    put_text = open = run


@pytest.mark.parametrize("health", [200, 503, None])
def test_preflights_hooks_never_touch_a_connection(tmp_path, health):
    """Issue 21: plan, problems and cluster_problems with a connection that raises on use."""
    inv = inventory.parse(four_nodes())
    conns = {n.name: Untouchable(n.name) for n in inv.nodes}
    run = RunContext(inv=inv, session=FakeSession(inv, tmp_path, conns),
                     inputs=RunInputs(api_key="k3-key", settled=frozenset({"token"}), manifest=manifest(10**9)))
    # the facts a real look gives; each hook only reads them
    found = preflight_facts(run, health, gpus=(), cuda="12.8", docker="29.0", nic="",
                            free_bytes=10**12, have_bytes=0, sudo=True)
    step = Preflight()
    for rank, node in inv.ranked():
        ctx = NodeContext(run, node, rank)
        assert step.plan(found[node.name], ctx) == []
        assert step.problems(found[node.name], ctx)   # no GPUs: found without asking the node
    probes = step.cluster_probes(found, run)
    assert bool(probes) == (health != 200)
    answered = {n: dataclasses.replace(f, **{MESH: Mesh((), ())}) for n, f in found.items()}
    assert step.cluster_problems(answered if probes else found, run) is not None
    step.closing_lines(run, found)
    assert all(not c.commands for c in conns.values())


def test_the_mesh_is_decided_by_the_runs_seed(tmp_path):
    run, _ = run_ctx(tmp_path)
    first = mesh_probes(run, facts(run, health=None))
    assert mesh_probes(run, facts(run, health=None)) == first   # pure: same facts, same seed
    run.settle(mesh_seed=run.inputs.mesh_seed + 1)
    assert mesh_probes(run, facts(run, health=None)) != first


def test_the_mesh_program_goes_on_stdin_and_its_argv_stays_small(tmp_path):
    # every `ps` on a node shows argv: the 7.6 KB program with its docstring must not be there
    run, conns = run_ctx(tmp_path)
    reachability_problems(run, facts(run, health=None))
    for conn in conns.values():
        (command,) = [c for c in conn.commands if "mesh" in c]
        assert command.startswith("python3 - mesh ") and len(command) < 400, command
        assert '"""' not in command and "import" not in command


def test_verify_asks_the_head_endpoint_ahead_only_within_its_bound(tmp_path):
    """The first look of a no-op `up` holds verify's checks too, bounded; verify's own look
    asks them without the bound (their own timeouts, 300 s for a generation)."""
    from k3deploy.node.http_probe import AHEAD_WITHIN
    from k3deploy.steps.engine.verify import VerifyEndpoint
    run, _ = run_ctx(tmp_path)
    head, worker = (NodeContext(run, node, rank) for rank, node in run.inv.ranked()[:2])
    endpoint = next(f for f in VerifyEndpoint().probes(head) if f.name == "endpoint")
    ahead = endpoint.asked_ahead()
    assert ahead is not None and ahead.name == "endpoint"
    assert json.loads(endpoint.stdin)["within"] is None
    assert json.loads(ahead.stdin)["within"] == AHEAD_WITHIN
    assert json.loads(ahead.stdin)["checks"] == json.loads(endpoint.stdin)["checks"]
    assert "endpoint" not in [f.name for f in VerifyEndpoint().probes(worker)]

"""preflight asks `nvidia-smi topo -m` in its cluster look, after the port mesh, and only
before a launch: a cluster that serves is not asked (as its ports are not), so a no-op `up`
runs `nvidia-smi` once per node. Facts in; the commands the fake connections receive and the
typed layout out, run by the runner's cluster look (run/cluster_look.py)."""

from __future__ import annotations

from types import SimpleNamespace

from k3deploy.cluster import inventory
from k3deploy.core.errors import UnreachableError
from k3deploy.facts.reach import Mesh
from k3deploy.facts.topology import Topology
from k3deploy.node.context import RunContext
from k3deploy.node.run_inputs import RunInputs
from k3deploy.run.cluster_look import look_across
from k3deploy.steps.checks.preflight import Preflight
from k3deploy.steps.checks.reachability import MESH
from k3deploy.steps.fabric.fabric_topology import KEY
from tests.realfix import real
from tests.unit.fakes import FakeConn, FakeSession
from tests.unit.invdata import four_nodes
from tests.unit.test_reachability_serving import preflight_facts

H100_8HCA = real("nvidia-smi/570.133.20/topo-m-h100-8x-8hca.txt")


class NodeConn(FakeConn):
    """A node whose mesh probes all got through and whose driver prints a real matrix."""

    def respond(self, command):
        if "topo -m" in command:
            return 0, H100_8HCA
        if "mesh" in command:
            return 0, '{"ports": {}, "probes": {}}'
        return 0, ""


def run_ctx(tmp_path, doc: dict, conn=NodeConn):
    inv = inventory.parse(doc)
    conns = {n.name: conn(n.name) for n in inv.nodes}
    run = RunContext(inv=inv, session=FakeSession(inv, tmp_path, conns),
                     inputs=RunInputs(api_key="k3-key", settled=frozenset({"token"})))
    return run, conns


def looked(run, conns, found):
    contexts = {n: SimpleNamespace(conn=c) for n, c in conns.items()}
    return look_across(Preflight(), found, contexts, run)


def keys(probes) -> dict[str, list[str]]:
    return {n: [p.key for p in ps] for n, ps in probes.items()}


def test_before_a_launch_every_node_runs_the_mesh_then_the_layout(tmp_path):
    run, conns = run_ctx(tmp_path, four_nodes())
    probes = Preflight().cluster_probes(preflight_facts(run, 503), run)
    assert keys(probes) == {n: [MESH, KEY] for n in conns}
    found = looked(run, conns, preflight_facts(run, 503))
    for name, conn in conns.items():
        assert [c for c in conn.commands if "topo" in c] == ["sh -c 'nvidia-smi topo -m'"]
        topo = found[name].gpu_nic_topology
        assert isinstance(topo, Topology) and len(topo.nics) == 8 and len(topo.nearest) == 8
        assert isinstance(found[name].mesh, Mesh)
    assert Preflight().cluster_detail(found, run) == {
        "gpu_nic": {n: "8 HCAs, nearest: 8 GPUs PIX" for n in conns}}


def test_a_serving_cluster_is_asked_neither(tmp_path):
    run, conns = run_ctx(tmp_path, four_nodes())
    found = looked(run, conns, preflight_facts(run, 200))
    assert all(not c.commands for c in conns.values())
    assert all(f.gpu_nic_topology is None for f in found.values())
    assert Preflight().cluster_detail(found, run) is None


def test_a_node_alone_has_no_mesh_but_its_layout(tmp_path):
    doc = four_nodes(gpu={"model": "b300", "count": 8})
    doc["nodes"] = doc["nodes"][:1]
    run, _ = run_ctx(tmp_path, doc)
    probes = Preflight().cluster_probes(preflight_facts(run, 503), run)
    assert keys(probes) == {"node0": [KEY]}


def test_socket_fabric_asks_no_layout(tmp_path):
    doc = four_nodes()
    doc["engine"] = {**doc.get("engine", {}), "fabric": "socket"}
    run, conns = run_ctx(tmp_path, doc)
    probes = Preflight().cluster_probes(preflight_facts(run, 503), run)
    assert keys(probes) == {n: [MESH] for n in conns}


class GoneConn(NodeConn):
    """node3 went away between its look and the cluster look."""

    def run(self, argv, **kwargs):
        if self.name == "node3":
            raise UnreachableError(self.name, "cannot reach it", hint="is it up?")
        return super().run(argv, **kwargs)


def test_a_node_gone_before_the_cluster_look_is_named_for_both(tmp_path):
    run, conns = run_ctx(tmp_path, four_nodes(), GoneConn)
    found = looked(run, conns, preflight_facts(run, 503))
    gone = found["node3"]
    assert isinstance(gone.mesh, UnreachableError) and gone.gpu_nic_topology is gone.mesh
    problems = Preflight().cluster_problems(found, run)
    assert [p for p in problems if p[1] == "fabric" and "topo" in p[2]] == [
        ("node3", "fabric", f"nvidia-smi topo -m: {gone.mesh}")]
    assert isinstance(found["node0"].gpu_nic_topology, Topology)

"""up's part of the fabric mesh (steps/fabric/fabric_mesh.py with `unless_serving`, the bringup
playbook, `up --no-fabric`): facts in, the mesh's commands or its closing line out. No I/O."""

import json

import pytest

from k3deploy import engines
from k3deploy.cli import app
from k3deploy.cluster import inventory
from k3deploy.cluster.hubmeta import Manifest, RepoFile
from k3deploy.facts.docker import Container, parse_inspect
from k3deploy.node.context import NodeContext, RunContext
from k3deploy.node.run_inputs import RunInputs
from k3deploy.run.run_steps import playbook_steps
from k3deploy.steps.fabric.fabric_mesh import FabricMesh, FabricMeshFacts
from k3deploy.steps.engine.launch import LaunchEngine
from tests.unit.fakes import FakeSession
from tests.unit.invdata import four_nodes

KEY = "k3-testkey-0123456789"
MANIFEST = Manifest("moonshotai/Kimi-K3", "main", "a" * 40, None,
                    (RepoFile("model-00001-of-00096.safetensors", 10**9, "b" * 64, "c" * 40),))


def nodes(tmp_path, **options) -> list[NodeContext]:
    inv = inventory.parse(four_nodes())
    run = RunContext(inv=inv, session=FakeSession(inv, tmp_path), options=options,
                     inputs=RunInputs(manifest=MANIFEST, api_key=KEY, token=None, settled=frozenset({"token"})))
    return [NodeContext(run, node, rank) for rank, node in inv.ranked()]


def inspect(label: str, running: bool = True) -> Container | None:
    """The container fact from `docker inspect`'s answer (the fields the launch reads)."""
    doc = {"State": {"Status": "running" if running else "exited", "Running": running},
           "Config": {"Image": "lmsysorg/sglang", "Labels": {engines.CONFIG_LABEL: label}}}
    return parse_inspect(json.dumps([doc]))


def looked(step, ctx, other: bool = False) -> FabricMeshFacts:
    """The step's facts on a node whose container runs the launch's configuration (or not)."""
    label = LaunchEngine().observe({"cuda": "13.0", "container": None}, ctx).spec.labels[
        engines.CONFIG_LABEL]
    return step.observe({"perftest": "", "cuda": "13.0",
                         "container": inspect("other" if other else label)}, ctx)


def test_a_group_running_this_configuration_gets_no_traffic(tmp_path):
    ctxs = nodes(tmp_path)
    step = FabricMesh({"unless_serving": True})
    facts = {c.name: looked(step, c) for c in ctxs}
    assert all(f.runs_configuration for f in facts.values())
    assert step.cluster_probes(facts, ctxs[0].run) == {}
    assert step.closing_lines(ctxs[0].run, facts) == [
        "fabric: not measured (the group already runs this configuration: no traffic is "
        "pushed through the fabric it serves over)"]


def test_one_node_on_another_configuration_is_measured(tmp_path):
    ctxs = nodes(tmp_path)
    step = FabricMesh({"unless_serving": True})
    facts = {c.name: looked(step, c, other=c.name == "node2") for c in ctxs}
    assert [f.runs_configuration for f in facts.values()] == [True, True, False, True]
    assert set(step.cluster_probes(facts, ctxs[0].run)) == {c.name for c in ctxs}


def test_the_launch_look_comes_only_with_unless_serving(tmp_path):
    ctx = nodes(tmp_path)[0]
    names = {f.name for f in FabricMesh({"unless_serving": True}).probes(ctx)}
    assert {"perftest", "container"} <= names
    assert {f.name for f in FabricMesh().probes(ctx)} == {"perftest"}
    assert {f.name for f in FabricMesh({"unless_serving": True}).probes(
        nodes(tmp_path, no_fabric=True)[0])} == {"perftest"}


def test_check_fabric_measures_a_serving_group(tmp_path):
    ctxs = nodes(tmp_path)
    step = FabricMesh()
    facts = {c.name: step.observe({"perftest": ""}, c) for c in ctxs}
    assert set(step.cluster_probes(facts, ctxs[0].run)) == {c.name for c in ctxs}


def test_a_misspelt_fabric_mesh_fact_fails(tmp_path):
    ctx = nodes(tmp_path)[0]
    with pytest.raises(TypeError, match="perftests"):
        FabricMesh().observe({"perftests": ""}, ctx)
    assert FabricMesh().observe({"perftest": ""}, ctx) == FabricMeshFacts(perftest="")


def test_no_fabric_measures_nothing_and_says_so(tmp_path):
    ctxs = nodes(tmp_path, no_fabric=True)
    step = FabricMesh({"unless_serving": True})
    facts = {c.name: step.observe({"perftest": ""}, c) for c in ctxs}
    assert step.cluster_probes(facts, ctxs[0].run) == {}
    assert step.closing_lines(ctxs[0].run, facts) == ["fabric: not measured (--no-fabric)"]


def test_bringup_measures_the_fabric_right_after_preflight():
    steps = playbook_steps("bringup")
    names = [s.name for s in steps]
    assert names[:3] == ["preflight", "fabric-mesh", "nvme"]
    assert steps[1].p.unless_serving is True


@pytest.mark.parametrize("flags, off", [([], False), (["--no-fabric"], True)])
def test_up_passes_no_fabric(monkeypatch, flags, off):
    seen = {}
    monkeypatch.setattr(app, "_run", lambda inv, steps, **kw: seen.update(kw) or 0)
    with pytest.raises(SystemExit):
        app.main(["up", "-i", "inv.yaml", *flags])
    assert seen["options"]["no_fabric"] is off

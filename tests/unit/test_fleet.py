"""The fleet inventory (cluster/fleet.py): its shape, the split into one Inventory per group,
the fleet skeleton `plan --emit-inventory F --groups N` writes, and the one place every command
that runs one group refuses a fleet."""

from __future__ import annotations

import pytest
import yaml

from k3deploy.cluster import fleet, inventory, sizing
from k3deploy.cluster.fleet_skeleton import fleet_skeleton_for, fleet_skeleton_yaml
from k3deploy.cluster.inventory_skeleton import skeleton_for
from k3deploy.core.errors import FleetNotSupported, InventoryError
from tests.unit import test_cli
from tests.unit.fleetdata import group, two_groups
from tests.unit.invdata import four_nodes


def test_a_fleet_splits_into_one_inventory_per_group():
    parsed = fleet.parse(two_groups(), source="/inv/fleet.yaml")
    groups = fleet.split(parsed)
    assert [(g.cluster, [n.name for n in g.nodes], g.head.name) for g in groups] == [
        ("fl-a", ["node0", "node1"], "node0"), ("fl-b", ["node2", "node3"], "node2")]
    # each is a whole one-group Inventory: the shared sections, its own nodes and ranks
    assert all(isinstance(g, inventory.Inventory) and g.gpu.model == "h200" for g in groups)
    assert [g.rank_of(n.name) for g in groups for n in g.nodes] == [0, 1, 0, 1]
    assert all(g.source == "/inv/fleet.yaml" for g in groups)   # relative paths: the fleet file
    assert [g.name for g in parsed.groups] == ["a", "b"]
    assert parsed.router_node().name == "node0"


def test_the_router_defaults_to_smg_pinned_on_the_first_head():
    doc = two_groups()
    del doc["router"]
    parsed = fleet.parse(doc)
    assert parsed.router_node() is parsed.groups[0].inventory.head
    router = parsed.router
    assert (router.port, router.metrics_port, router.policy, router.image,
            router.health_check_interval) == (30000, 29000, "cache_aware",
                                              "lightseekorg/smg:1.13.0", 5)


def test_a_group_overrides_a_shared_section_key_by_key():
    doc = two_groups(engine={"image": "lmsysorg/sglang:kimi-k3", "context_length": 65536,
                             "args": {"watchdog-timeout": 600}})
    doc["groups"][1]["engine"] = {"image": "lmsysorg/sglang:kimi-k3-cu12", "args": {"max-running-requests": 64}}
    doc["groups"][1]["ssh"] = {"user": "ubuntu"}
    a, b = fleet.split(fleet.parse(doc))
    assert (a.engine.image, b.engine.image) == ("lmsysorg/sglang:kimi-k3",
                                                "lmsysorg/sglang:kimi-k3-cu12")
    assert b.engine.context_length == 65536                      # not overridden: shared
    assert b.engine.args == {"watchdog-timeout": 600, "max-running-requests": 64}   # merged
    assert (a.ssh.user, b.ssh.user) == (None, "ubuntu")


def test_an_extra_router_node_is_no_group_member():
    doc = two_groups(router={"node": {"name": "gw", "address": "10.0.0.99"}, "port": 8000})
    parsed = fleet.parse(doc)
    assert parsed.router_node().name == "gw"
    assert all("gw" not in [n.name for n in g.nodes] for g in fleet.split(parsed))


def test_a_one_group_inventory_is_unchanged(tmp_path):
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(four_nodes()))
    assert inventory.load(path).cluster == "h100"
    with pytest.raises(InventoryError, match="problem"):
        fleet.load(path)


def test_the_one_group_loader_refuses_a_fleet_naming_what_reads_it():
    with pytest.raises(FleetNotSupported) as err:
        inventory.parse(two_groups(), source="f.yaml")
    assert err.value.exit_code == 2
    text = "\n".join(err.value.lines())
    assert "f.yaml describes a fleet (2 groups: a, b" in text
    assert "`k3deploy check -i f.yaml` validates a fleet" in text


# `up` and `down` run a fleet (run/fleet_run.py; tests/unit/test_fleet_run.py), `status` looks at
# one (cli/fleet_status.py; tests/unit/test_fleet_status.py), `watch` follows one
# (cli/fleet_watch.py; tests/unit/test_guard_router.py), `chat` and `bench` go through its
# router (cli/fleet_cmd.endpoint_of; tests/unit/test_fleet_endpoint.py), `verify` checks each
# group and the router (run/fleet_verify.py; tests/unit/test_fleet_verify.py), `logs` collects
# each group's and the router's (run/fleet_logs.py; test_fleet_up.py)
ONE_GROUP_COMMANDS = [["run", "bringup"]]


@pytest.mark.parametrize("argv", ONE_GROUP_COMMANDS, ids=lambda a: a[0])
def test_every_command_that_runs_one_group_refuses_a_fleet(argv, tmp_path, capsys):
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(two_groups()))
    assert test_cli.exit_code([*argv, "-i", str(path)]) == 2
    err = capsys.readouterr().err
    assert "describes a fleet (2 groups: a, b, behind one router)" in err
    assert "k3deploy check -i" in err
    assert not (tmp_path / ".k3deploy").exists()   # refused before any state, lock or SSH


def test_check_validates_a_fleet_and_lists_its_groups(tmp_path, capsys):
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(two_groups()))
    assert test_cli.exit_code(["check", "-i", str(path)]) == 0
    out = capsys.readouterr().out
    assert "fleet fl: 2 groups of 2 nodes x 8 h200 (sglang); router lightseekorg/smg:1.13.0 " \
           "on node0 (10.0.0.10:30000" in out
    assert "group a (cluster fl-a): node0 (rank 0, head), node1 (rank 1)" in out
    assert "group b (cluster fl-b): node2 (rank 0, head), node3 (rank 1)" in out
    bad = two_groups()
    bad["groups"][1] = group("b", 1)
    path.write_text(yaml.safe_dump(bad))
    assert test_cli.exit_code(["check", "-i", str(path)]) == 2
    assert "groups[1].nodes[0].name: 'node1' is already groups[0].nodes[1]'s" in \
        capsys.readouterr().err


@pytest.mark.parametrize("gpu,nodes,engine", [("h200", 2, "sglang"), ("h100", 4, "sglang"),
                                              ("b200", 2, "vllm"), ("b300", 1, "sglang")])
def test_the_fleet_skeleton_validates(gpu, nodes, engine):
    (config,) = sizing.plan(gpu=gpu, nodes=nodes, gpus_per_node=8, precision="mxfp4",
                            engine=engine)
    text = fleet_skeleton_yaml(config, 3)
    parsed = fleet.parse(yaml.safe_load(text), "<skeleton>")
    groups = fleet.split(parsed)
    assert [len(g.nodes) for g in groups] == [nodes] * 3
    assert len({n.name for g in groups for n in g.nodes}) == 3 * nodes
    assert parsed.router_node() is groups[0].head
    assert text.startswith("# k3deploy inventory skeleton")
    # a group of the fleet is what `plan` emits for one group, nodes aside
    one = inventory.parse(skeleton_for(config), "<one>")
    assert (one.engine, one.gpu, one.model) == (groups[0].engine, groups[0].gpu,
                                                groups[0].model)
    assert fleet_skeleton_for(config, 3)["router"]["node"] == "node0"


def test_plan_emits_a_fleet_with_groups(tmp_path, capsys):
    out = tmp_path / "fleet.yaml"
    argv = ["plan", "--gpu", "h200", "--nodes", "2", "--gpus-per-node", "8", "--precision",
            "mxfp4", "--emit-inventory", str(out)]
    assert test_cli.exit_code([*argv, "--groups", "2"]) == 0
    assert [g["name"] for g in yaml.safe_load(out.read_text())["groups"]] == ["g0", "g1"]
    assert fleet.load(out).cluster == "k3-h200-2x2x8"
    assert test_cli.exit_code(argv[:-2] + ["--groups", "2"]) == 2
    assert "--groups shapes the inventory plan writes" in capsys.readouterr().err


def test_check_does_a_fleet_groups_sizing_as_preflight_does_one_groups(tmp_path, capsys):
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(two_groups(gpu={"model": "h100", "count": 8})))
    assert test_cli.exit_code(["check", "-i", str(path)]) == 1
    out = capsys.readouterr().out
    assert "each group: 2x8 H100 (16 x 80 GB H100 SXM5 = 1,280 GB) at mxfp4" in out
    assert "does not fit" in out

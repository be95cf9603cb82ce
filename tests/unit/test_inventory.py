"""Inventory validation: every rule, with the message a user sees."""

import copy

import pydantic
import pytest
import yaml

from k3deploy.cluster import inventory
from k3deploy.core.errors import InventoryError
from tests.unit.invdata import four_nodes


def problems(doc) -> list[str]:
    with pytest.raises(InventoryError) as err:
        inventory.parse(doc, source="inv.yaml")
    assert err.value.exit_code == 2
    assert str(err.value).startswith("inv.yaml:")
    return err.value.problems


def test_valid_four_nodes_defaults():
    inv = inventory.parse(four_nodes(), source="/x/inv.yaml")
    assert inv.head.name == "node0"
    assert [r for r, _ in inv.ranked()] == [0, 1, 2, 3]
    assert inv.total_gpus == 32
    assert inv.ports.dist_init == 20000 and inv.ports.serve == 8000
    assert inv.paths.hf == "/mnt/nvme/hf" and inv.paths.docker == "/mnt/nvme/docker"
    assert inv.resolve_path("id_ed25519") == "/x/id_ed25519"


def test_explicit_ranks_pick_the_head():
    doc = four_nodes()
    for node, rank in zip(doc["nodes"], [2, 0, 3, 1]):
        node["rank"] = rank
    inv = inventory.parse(doc)
    assert inv.head.name == "node1"
    assert inv.rank_of("node2") == 3


def test_duplicate_names_and_addresses():
    doc = four_nodes()
    doc["nodes"][1]["name"] = "node0"
    doc["nodes"][2]["address"] = "10.0.0.10"
    found = problems(doc)
    assert "nodes[1].name: 'node0' is already used by nodes[0]; every node needs its own " \
        "name" in found
    assert any(p.startswith("nodes[2].address: '10.0.0.10' is already used by nodes[0]")
               for p in found)
    assert any(p.startswith("nodes[2].address: '10.0.0.10' is already the private address of "
                            "nodes[0]") and "SGLANG_HOST_IP must be unique" in p for p in found)


def test_duplicate_rank_zero_is_named():
    doc = four_nodes()
    for node, rank in zip(doc["nodes"], [0, 0, 2, 3]):
        node["rank"] = rank
    found = problems(doc)
    assert any(p.startswith("nodes[1].rank: rank 0 is already claimed by nodes[0] (node0)")
               and "never form" in p for p in found), found


def test_ranks_must_be_complete_and_on_every_node():
    doc = four_nodes()
    for node, rank in zip(doc["nodes"], [0, 1, 2, 5]):
        node["rank"] = rank
    assert problems(doc) == ["nodes[3].rank: 5 is outside 0..3; ranks must be exactly 0..3"]
    doc = four_nodes()
    doc["nodes"][0]["rank"] = 0
    found = problems(doc)
    assert [p.split(":")[0] for p in found] == ["nodes[1].rank", "nodes[2].rank", "nodes[3].rank"]
    assert all("on every node or on none" in p for p in found)


def test_ipv6_dist_init_address_rejected():
    doc = four_nodes()
    doc["nodes"][0]["private_address"] = "fd00::10"
    assert any("IPv6" in p and "nodes[0].private_address" in p for p in problems(doc))


def test_tp_ep_must_equal_total_gpus():
    doc = four_nodes(engine={"args": {"tp-size": 16, "ep-size": 32}})
    found = problems(doc)
    assert any(p.startswith("engine.args.tp-size: 16") and "must equal 32" in p for p in found)
    assert not any("ep-size" in p for p in found)


def test_shell_reaching_values_are_constrained():
    doc = four_nodes()
    doc["nodes"][0]["nic"] = "eth0; rm -rf /"
    doc["nodes"][1]["name"] = "Node$(id)"
    doc["paths"] = {"nvme": "/mnt/nvme dir"}
    doc["engine"] = {"env": {"BAD-NAME": "x", "OK": "a\nb"}, "image": "Image With Spaces"}
    found = problems(doc)
    for field in ("nodes[0].nic", "nodes[1].name", "paths.nvme", "engine.image",
                  "engine.env.OK"):
        assert any(p.startswith(field) for p in found), (field, found)
    assert any("engine.env.BAD-NAME" in p for p in found)


def test_secrets_are_not_accepted_as_env_or_args():
    doc = four_nodes(engine={"env": {"HF_TOKEN": "hf_x"}, "args": {"api-key": "k"}})
    found = problems(doc)
    assert any(p.startswith("engine.env.HF_TOKEN: secrets must not") for p in found)
    assert any(p.startswith("engine.args.api-key: secrets must not") for p in found)


def test_unknown_field_and_all_errors_at_once():
    doc = four_nodes(cluser="typo")
    doc["nodes"][0]["adress"] = "x"
    found = problems(doc)
    assert "cluser: unknown field (check the spelling; see inventories/ for examples)" in found
    assert any(p.startswith("nodes[0].adress: unknown field") for p in found)


def test_schema_error_does_not_hide_the_cross_field_rules():
    doc = four_nodes(engine={"args": {"tp-size": 16}, "env": {"HF_TOKEN": "hf_x", "BAD-NAME": 1}})
    doc["nodes"][0]["rnak"] = 0  # misspelt
    doc["nodes"][3]["address"] = "10.0.0.11"
    doc["nodes"][1]["private_address"] = "fd00::11"
    doc["nodes"][2]["nic"] = "eth0; reboot"
    found = problems(doc)
    assert found[:3] == [
        "engine.env.BAD-NAME.[key]: 'BAD-NAME' is not allowed here (must match "
        "^[A-Za-z_][A-Za-z0-9_]{0,63}$)",
        "nodes[0].rnak: unknown field (check the spelling; see inventories/ for examples)",
        "nodes[2].nic: 'eth0; reboot' is not allowed here (must match ^[A-Za-z0-9_.-]{1,15}$)"]
    rules = [p.split(":")[0] for p in found[3:]]
    assert rules == ["nodes[3].address", "nodes[1].private_address", "engine.args.tp-size",
                     "engine.env.HF_TOKEN"], found


def test_every_problem_of_a_broken_node_list_has_its_index():
    doc = four_nodes()
    doc["nodes"][1]["address"] = "bad address"  # failed: no duplicate or IP rule on it
    doc["nodes"][2] = "node2"                     # not even a mapping: keeps its place
    for node, rank in zip(doc["nodes"][:2] + doc["nodes"][3:], (0, 0, 1)):
        node["rank"] = rank
    found = problems(doc)
    assert [p.split(":")[0] for p in found] == ["nodes[1].address", "nodes[2]", "nodes[1].rank"]


def test_port_collision():
    doc = four_nodes(ports={"dist_init": 8000, "serve": 8000})
    assert any("8000 is used for more than one purpose" in p for p in problems(doc))


def test_the_mesh_port_clash_names_both_keys():
    assert problems(four_nodes(ports={"mesh": 8952})) == [
        "ports: 8952 is used for more than one purpose (ports.guard, ports.mesh)"]
    assert problems(four_nodes(ports={"peer": 9000, "mesh": 9000})) == [
        "ports: 9000 is used for more than one purpose (ports.peer, ports.mesh)"]


def test_one_node_runs_no_mesh_so_its_port_may_equal_another():
    one = four_nodes(nodes=[{"name": "solo", "address": "10.0.0.9"}], ports={"mesh": 8000})
    assert inventory.parse(one).ports.mesh == 8000


def test_load_reports_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(InventoryError) as err:
        inventory.load(tmp_path / "nope.yaml")
    assert err.value.problems == ["file not found"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster: [unclosed\n")
    with pytest.raises(InventoryError) as err:
        inventory.load(bad)
    assert "not valid YAML" in err.value.problems[0]


def test_load_round_trip(tmp_path):
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(four_nodes(ssh={"key": "id_ed25519"})))
    inv = inventory.load(path)
    assert inv.source == str(path)
    assert inv.resolve_path(inv.ssh.key) == str(tmp_path / "id_ed25519")


def test_frozen_models():
    inv = inventory.parse(copy.deepcopy(four_nodes()))
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        inv.cluster = "other"

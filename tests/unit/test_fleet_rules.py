"""The fleet's validation (cluster/fleet.py, fleet_rules.py): every problem at once, before any
SSH, each naming the group (groups[i] or its name) and the node (groups[i].nodes[j])."""

from __future__ import annotations

import pytest

from k3deploy.cluster import fleet
from k3deploy.core.errors import InventoryError
from tests.unit.fleetdata import group, two_groups


def problems(doc) -> list[str]:
    with pytest.raises(InventoryError) as err:
        fleet.parse(doc, source="fleet.yaml")
    assert err.value.exit_code == 2
    return err.value.problems


def test_nodes_repeated_across_groups_are_named_by_group_and_node():
    doc = two_groups()
    doc["groups"][1]["nodes"][0].update(name="node1", address="10.0.0.11")
    doc["groups"][1]["nodes"][1].update(private_address="10.0.0.10")
    assert problems(doc) == [
        "groups[1].nodes[0].name: 'node1' is already groups[0].nodes[1]'s (node1); every node "
        "of a fleet needs its own name",
        "groups[1].nodes[0].address: '10.0.0.11' is already groups[0].nodes[1]'s (node1); one "
        "SSH endpoint is one machine; a machine serves in one group",
        "groups[1].nodes[0].private_address: '10.0.0.11' is already groups[0].nodes[1]'s "
        "(node1); SGLANG_HOST_IP must be unique per node across the fleet",
        "groups[1].nodes[1].private_address: '10.0.0.10' is already groups[0].nodes[0]'s "
        "(node0); SGLANG_HOST_IP must be unique per node across the fleet"]


def test_one_gateway_with_a_port_per_node_spans_groups():
    doc = two_groups(ssh={"port": 22})
    for i, node in enumerate(n for g in doc["groups"] for n in g["nodes"]):
        node.update(private_address=node["address"], address="gw.example.net", port=40100 + i)
    assert len(fleet.parse(doc).groups) == 2


def test_ranks_are_0_to_m_minus_1_in_each_group():
    doc = two_groups()
    doc["groups"][1]["nodes"][0]["rank"] = 1
    doc["groups"][1]["nodes"][1]["rank"] = 2
    assert problems(doc) == ["groups[1].nodes[1].rank: 2 is outside 0..1; ranks must be "
                             "exactly 0..1"]
    doc["groups"][1]["nodes"][1]["rank"] = 0
    head = fleet.parse(doc).groups[1].inventory.head
    assert head.name == "node3"   # each group has its own head, rank 0 of that group


def test_groups_of_different_shapes_are_refused_naming_what_differs():
    doc = two_groups(groups=[group("a", 0), group("b", 2, count=3, gpu={"model": "h100"})])
    assert problems(doc) == [
        "groups[1] (b): not the shape of groups[0] (a): gpu 3 nodes x 8 h100 (groups[0]: 2 "
        "nodes x 8 h200); every group of a fleet has the same GPUs, node count, engine, "
        "layout and model, the router sends any request anywhere"]
    doc = two_groups(groups=[group("a", 0), group("b", 2, engine={"kind": "vllm"},
                                                  model={"revision": "abc123"})])
    (found,) = problems(doc)
    assert found.startswith("groups[1] (b): not the shape of groups[0] (a): engine vllm (mp) "
                            "(groups[0]: sglang); parallel layout dp-ep (groups[0]: tp-ep); "
                            "model moonshotai/Kimi-K3@abc123 mxfp4 (groups[0]: "
                            "moonshotai/Kimi-K3@main mxfp4)")


def test_the_gpu_arithmetic_runs_per_group():
    # shared and wrong for every group: said once, as the one-group inventory says it
    assert problems(two_groups(engine={"args": {"tp-size": 8}})) == [
        "engine.args.tp-size: 8 but the cluster has 16 GPUs (2 nodes x 8); it must equal 16"]
    # a group's own override: that group's path
    doc = two_groups()
    doc["groups"][1]["engine"] = {"args": {"tp-size": 32}}
    assert problems(doc) == [
        "groups[1].engine.args.tp-size: 32 but the cluster has 16 GPUs (2 nodes x 8); it must "
        "equal 16",
        "groups[1] (b): not the shape of groups[0] (a): parallel layout tp-ep tp-size=32 "
        "(groups[0]: tp-ep); every group of a fleet has the same GPUs, node count, engine, "
        "layout and model, the router sends any request anywhere"]
    # shared, right for one group only (the groups differ in node count): named per group
    doc = two_groups(engine={"args": {"tp-size": 16}},
                     groups=[group("a", 0), group("b", 2, count=4)])
    found = problems(doc)
    assert "groups[1] (b): engine.args.tp-size: 16 but the cluster has 32 GPUs (4 nodes x 8); " \
           "it must equal 32" in found


def test_every_group_takes_the_one_serving_key():
    doc = two_groups()
    doc["groups"][1]["engine"] = {"api_key_env": "GROUP_B_KEY"}
    assert problems(doc) == [
        "groups[1] (b): engine.api_key_env/require_api_key GROUP_B_KEY/True differ from "
        "groups[0]'s (None/True); the router passes each client's key to whichever group "
        "serves it, so every group takes one key"]


@pytest.mark.parametrize("router,expected", [
    ({"port": 8000}, "router.port: 8000 is ports.serve of groups[0] (a) on node0, the "
                     "router's node; choose another port"),
    ({"metrics_port": 8952}, "router.metrics_port: 8952 is ports.guard of groups[0] (a) on "
                             "node0, the router's node; choose another port"),
    ({"node": "node2", "port": 20000}, "router.port: 20000 is ports.dist_init of groups[1] "
                                       "(b) on node2, the router's node; choose another port"),
    ({"port": 29000}, "router.metrics_port: 29000 is router.port too; SMG binds both"),
])
def test_router_ports_clash_with_what_runs_on_its_node(router, expected):
    assert problems(two_groups(router=router)) == [expected]


def test_router_ports_on_another_machine_do_not_clash():
    # node0 is a0's head; 8000 is only taken there, not on the extra node
    doc = two_groups(router={"node": {"name": "edge", "address": "10.0.0.99"}, "port": 8000})
    assert fleet.parse(doc).router.port == 8000


def test_one_node_groups_keep_sglang_dp_attention_ports_free():
    # one node: SGLang's DP attention binds --port + 233 .. + 239 (PortArgs.init_new)
    doc = two_groups(router={"port": 8236},
                     groups=[group("a", 0, count=1), group("b", 1, count=1)])
    assert problems(doc) == ["router.port: 8236 is SGLang's DP-attention ports of groups[0] (a) "
                             "on node0, the router's node; choose another port"]


@pytest.mark.parametrize("node,expected", [
    ("node9", "router.node: 'node9' is no node of any group (a: node0, node1; b: node2, "
              "node3); name one, or describe an extra node {name, address, ...}"),
    ({"name": "edge", "address": "10.0.0.12"},
     "router.node.address: '10.0.0.12' is groups[1].nodes[0] (node2); to run the router "
     "there, write router.node: node2"),
    ({"name": "node1", "address": "10.0.0.50"},
     "router.node.name: 'node1' is groups[0].nodes[1]'s; to run the router there, write "
     "router.node: node1"),
    ({"name": "edge", "address": "10.0.0.50", "rank": 0},
     "router.node.rank: the router's own node is no rank of any group; remove it"),
])
def test_the_router_node_is_a_group_node_or_a_machine_of_its_own(node, expected):
    assert problems(two_groups(router={"node": node})) == [expected]


@pytest.mark.parametrize("image,pinned", [("lightseekorg/smg", False),
                                          ("lightseekorg/smg:latest", False),
                                          ("lightseekorg/smg:1.13.0", True),
                                          ("registry.local:5000/smg@sha256:" + "a" * 64, True)])
def test_the_router_image_is_pinned(image, pinned):
    doc = two_groups(router={"image": image})
    if pinned:
        assert fleet.parse(doc).router.image == image
    else:
        assert problems(doc) == [f"router.image: {image!r} is not pinned; name a version "
                                 "(lightseekorg/smg:1.13.0) or a digest, so every up runs the "
                                 "router it was tested with"]


def test_group_names_and_the_fleet_name():
    doc = two_groups(cluster="a" * 40)   # a valid name, but 42 characters with "-a"
    doc["groups"][1]["name"] = "a"
    doc["groups"][0]["cluster"] = "mine"
    found = problems(doc)
    assert "groups[0].cluster: a group runs as cluster <fleet cluster>-<group name>; remove it" \
        in found
    assert "groups[1].name: 'a' is already groups[0]'s; every group needs its own name" in found
    assert any(p.startswith(f"groups[0].name: 'a' is not allowed: the group runs as cluster "
                            f"{'a' * 40}-a") for p in found)


def test_every_problem_at_once():
    doc = two_groups(nodes=[{"name": "x", "address": "10.0.0.1"}],
                     router={"node": "node0", "policy": "fastest", "port": 8000})
    doc["groups"][0]["nodes"][1]["nic"] = "bad nic"
    doc["groups"][1]["bogus"] = 1
    doc["groups"][1]["gpu"] = {"count": 4}
    found = problems(doc)
    assert found[0] == "nodes: a fleet's nodes are listed under each group (groups[].nodes); " \
                       "move them there"
    expected = ["router.policy: Input should be", "groups[0].nodes[1].nic: 'bad nic' is not "
                "allowed here", "groups[1].bogus: unknown field", "groups[1] (b): not the "
                "shape of groups[0] (a): gpu 2 nodes x 4 h200", "router.port: 8000 is "
                "ports.serve of groups[0] (a) on node0"]
    for start in expected:
        assert any(p.startswith(start) for p in found), (start, found)
    assert len(found) == 1 + len(expected)


@pytest.mark.parametrize("change,expected", [
    (lambda d: d.pop("cluster"),
     "cluster: missing; the fleet's name (each group runs as <cluster>-<group>)"),
    (lambda d: d["groups"][1].pop("name"), "groups[1].name: missing; every group needs its own "
                                           "name"),
    (lambda d: d.update(groups=5), "groups: must be a list of groups, each {name, nodes: [...]}"),
    (lambda d: d.update(groups=[]), "groups: must be a list of groups, each {name, nodes: [...]}"),
    (lambda d: d.update(groups=[1, {"name": "x"}]),
     "groups[0]: must be a mapping {name, nodes: [...]}"),
])
def test_a_malformed_fleet_says_where(change, expected):
    doc = two_groups()
    change(doc)
    assert problems(doc) == [expected]

"""Which node preflight blames when the nodes differ: facts in, problems out."""

from k3deploy.cli.init_findings import Host
from k3deploy.cluster import inventory
from k3deploy.node.context import NodeContext, RunContext
from k3deploy.steps.checks.preflight import _gpu_problems
from k3deploy.steps.checks.sameness import majority, undeclared_problems
from tests.unit.invdata import four_nodes
from tests.unit.preflight_facts import preflight_facts

H100 = "NVIDIA H100 80GB HBM3"
CU13, CU12 = ("580.65.06", "13.0"), ("570.133.20", "12.8")


def facts(gpus=8, name=H100, driver=CU13):
    """A node's preflight facts (facts/nvidia_smi.Gpu records) with these GPUs and driver."""
    return preflight_facts(gpus=[{"name": name, "total_mib": 81559, "used_mib": 0}] * gpus,
                           driver=driver[0], cuda=driver[1])


def two_nodes():
    doc = four_nodes()
    doc["nodes"] = doc["nodes"][:2]
    return inventory.parse(doc)


def per_node(inv, all_facts):
    run = RunContext(inv=inv, session=None)
    return {n.name: [c for c, _ in _gpu_problems(all_facts[n.name], NodeContext(run, n, r))]
            for r, n in inv.ranked()}


def test_two_nodes_one_short_of_gpus_blames_that_node_only():
    inv = two_nodes()
    for order in (("node0", "node1"), ("node1", "node0")):  # no dependence on order or hashing
        all_facts = {order[0]: facts(), order[1]: facts()}
        all_facts["node1"] = facts(gpus=7)
        assert per_node(inv, all_facts) == {"node0": [], "node1": ["gpus"]}
        assert undeclared_problems(all_facts) == []


def test_two_nodes_both_unlike_the_inventory_are_both_named():
    inv = two_nodes()
    found = per_node(inv, {"node0": facts(gpus=4), "node1": facts(name="NVIDIA H200")})
    assert found == {"node0": ["gpus"], "node1": ["gpus"]}


def test_two_node_driver_tie_lists_both_and_names_none():
    for first, second in ((CU13, CU12), (CU12, CU13)):
        rows = undeclared_problems({"node0": facts(driver=first), "node1": facts(driver=second)})
        assert [(n, c) for n, c, _ in rows] == [("cluster", "identical")]
        message = rows[0][2]
        for value in ("node0 " + first[1], "node1 " + second[1], "node0 " + first[0],
                      "node1 " + second[0], "no majority"):
            assert value in message, message


def test_strict_majority_names_the_odd_node():
    all_facts = {f"node{i}": facts() for i in range(4)}
    all_facts["node2"] = facts(driver=CU12)
    rows = undeclared_problems(all_facts)
    assert [(n, c) for n, c, _ in rows] == [("node2", "identical")]
    assert "driver 570.133.20, CUDA 12.8 differs from the majority's driver 580.65.06, " \
           "CUDA 13.0; install the others' driver (CUDA 13.0)" in rows[0][2]


def test_half_and_half_is_no_majority():
    all_facts = {"node0": facts(), "node1": facts(), "node2": facts(driver=CU12),
                 "node3": facts(driver=CU12)}
    rows = undeclared_problems(all_facts)
    assert [n for n, _, _ in rows] == ["cluster"]
    assert majority({"a": "1", "b": "1", "c": "2"}) == "1"
    assert majority({"a": "1", "b": "2"}) is None


def test_same_cuda_other_driver_is_still_named():
    all_facts = {f"node{i}": facts() for i in range(3)}
    all_facts["node1"] = facts(driver=("580.82.07", "13.0"))
    rows = undeclared_problems(all_facts)
    assert [(n, c) for n, c, _ in rows] == [("node1", "identical")]
    assert rows[0][2].startswith("driver 580.82.07 differs from the majority's driver 580.65.06")


def test_a_node_whose_nvidia_smi_failed_is_left_to_the_per_node_check():
    all_facts = {"node0": facts(), "node1": preflight_facts(gpus=None, driver=None, cuda=None)}
    assert undeclared_problems(all_facts) == []


def test_init_names_the_odd_host_as_preflight_names_the_odd_node():
    """init compares the hosts it found (cli/init_findings.py) by the same rule."""
    hosts = {f"h{i}": Host(f"10.0.0.{i}", f"h{i}", None, H100, "h100", 8, *CU13, None)
             for i in range(3)}
    hosts["h1"] = Host("10.0.0.1", "h1", None, H100, "h100", 8, *CU12, None)
    assert [(n, c) for n, c, _ in undeclared_problems(hosts)] == [("h1", "identical")]

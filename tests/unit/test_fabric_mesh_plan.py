"""The pairwise mesh's schedule and verdict (cluster/mesh_plan.py) and the step's findings
(steps/fabric/fabric_mesh.py) from what the node programs print."""

import json
from itertools import combinations

import pytest

from k3deploy.cluster import inventory, mesh_plan
from k3deploy.serving import certificate
from k3deploy.facts.fabric_mesh import MeshCount, MeshFailed, Received, parse_answer
from k3deploy.steps.fabric.fabric_mesh import FabricMesh, FabricMeshFacts, kept, schedule_seconds
from tests.unit.invdata import four_nodes

GB = 1e9 / 8   # bytes per second in one Gbit/s


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 9])
def test_every_pair_meets_once_in_disjoint_rounds(n):
    names = [f"node{i}" for i in range(n)]
    rounds = mesh_plan.rounds(names)
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    met = [frozenset(p) for r in rounds for p in r]
    assert sorted(map(sorted, met)) == sorted(map(sorted, combinations(names, 2)))
    for r in rounds:
        busy = [x for p in r for x in p]
        assert len(busy) == len(set(busy))


def test_partners_agree_both_ways():
    names = [f"node{i}" for i in range(6)]
    partners = mesh_plan.partners(names)
    for a, mine in partners.items():
        for k, b in enumerate(mine):
            assert b is None or partners[b][k] == a


def answers(rates: dict[tuple[str, str], float], seconds: float = 3.0) -> dict:
    """What every node's program prints, for links at the given Gbit/s (src, dst)."""
    out: dict = {}
    for (src, dst), gbps in rates.items():
        got = out.setdefault(dst, {"received": {}, "sent": {}, "errors": {}})
        got["received"][src] = {"bytes": int(gbps * GB * seconds), "seconds": seconds}
    return out


def four_node_rates(slow: str | None = None, slow_gbps: float = 0.2) -> dict:
    names = [f"node{i}" for i in range(4)]
    return {(a, b): (slow_gbps if slow in (a, b) else 9.0 + i * 0.1)
            for i, (a, b) in enumerate((a, b) for a in names for b in names if a != b)}


def test_a_slow_node_is_named_with_all_its_links_and_nothing_else():
    names = [f"node{i}" for i in range(4)]
    verdict = mesh_plan.judge(mesh_plan.links(answers(four_node_rates("node1")), names))
    assert verdict.nodes == ["node1"]
    assert sorted(lk.name for lk in verdict.slow) == sorted(
        [f"node1->{n}" for n in ("node0", "node2", "node3")]
        + [f"{n}->node1" for n in ("node0", "node2", "node3")])


def test_an_even_mesh_has_no_slow_link_but_a_floor_finds_them_all():
    names = [f"node{i}" for i in range(4)]
    found = mesh_plan.links(answers(four_node_rates()), names)
    assert mesh_plan.judge(found).slow == []
    assert len(mesh_plan.judge(found, min_gbps=25).slow) == 12


def judged(rates: dict, n: int = 4, min_gbps: float | None = None) -> mesh_plan.Verdict:
    names = [f"node{i}" for i in range(n)]
    return mesh_plan.judge(mesh_plan.links(answers(rates), names), min_gbps)


def test_the_reference_is_the_median_of_each_nodes_best_link():
    # one slow node of 4: six links of twelve are slow, so all links' median is ~4.7 Gbit/s;
    # the best links are node0 9.9, node1 0.2, node2 10.1, node3 10.1 -> median 10.0
    verdict = judged(four_node_rates("node1"))
    assert verdict.median_gbps == pytest.approx((9.9 + 10.1) / 2)
    assert verdict.nodes == ["node1"]


def test_two_slow_nodes_of_four_are_both_named():
    """Ten links of twelve touch node1 or node2: their median is slow, so under half the median
    of all links nothing is slow; the best link of node0 and node3 (node0<->node3) still says
    what the fabric carries."""
    names = [f"node{i}" for i in range(4)]
    rates = {(a, b): 9.0 if {a, b} == {"node0", "node3"} else 0.2
             for a in names for b in names if a != b}
    verdict = judged(rates)
    assert verdict.nodes == ["node1", "node2"]
    assert sorted(lk.name for lk in verdict.slow) == sorted(
        f"{a}->{b}" for a, b in rates if {a, b} != {"node0", "node3"})


def test_one_slow_link_only_is_named_and_no_node():
    rates = four_node_rates()
    rates[("node0", "node2")] = 1.0
    verdict = judged(rates)
    assert [lk.name for lk in verdict.slow] == ["node0->node2"]
    assert verdict.nodes == []


def test_all_links_equal_none_is_slow():
    names = [f"node{i}" for i in range(4)]
    verdict = judged({(a, b): 5.0 for a in names for b in names if a != b})
    assert verdict.slow == [] and verdict.nodes == []
    assert verdict.median_gbps == pytest.approx(5.0)


def test_min_gbps_names_links_the_median_passes():
    rates = four_node_rates()
    rates[("node3", "node1")] = 7.0       # over half the median, under the floor
    verdict = judged(rates, min_gbps=8.0)
    assert [lk.name for lk in verdict.slow] == ["node3->node1"]
    assert judged(rates).slow == []


def test_a_link_that_carried_nothing_is_slow_and_says_why():
    names = ["node0", "node1"]
    found = {"node0": {"received": {}, "sent": {}, "errors": {"node1": "ConnectionRefusedError"}},
             "node1": {"received": {"node0": {"bytes": 0, "seconds": 0}}, "sent": {}, "errors": {}}}
    links = mesh_plan.links(found, names)
    assert [(lk.name, lk.gbps) for lk in links] == [("node0->node1", None), ("node1->node0", None)]
    assert "ConnectionRefusedError" in links[0].error


def meshed(docs: dict) -> dict[str, FabricMeshFacts]:
    """Each node's facts after the mesh: its program's last line, parsed."""
    return {n: FabricMeshFacts("", fabric_mesh=parse_answer(f"some log line\n{json.dumps(d)}\n"))
            for n, d in docs.items()}


def unmeshed(inv) -> dict[str, FabricMeshFacts]:
    return {n.name: FabricMeshFacts("") for n in inv.nodes}


def test_the_programs_answer_is_typed():
    out = json.dumps({"received": {"node1": {"bytes": 375000000, "seconds": 3.0}},
                      "sent": {"node1": 375000000}, "errors": {"node2": "TimeoutError"}})
    assert parse_answer(out) == MeshCount({"node1": Received(375000000, 3.0)},
                                          {"node1": 375000000}, {"node2": "TimeoutError"})
    assert parse_answer('{"error": "cannot listen on 10.0.0.3:8953"}') == \
        MeshFailed("cannot listen on 10.0.0.3:8953")
    assert parse_answer("Traceback (most recent call last):") is None
    assert parse_answer('{"probes": {}}') is None


class Run:
    def __init__(self, inv, **options):
        self.inv, self.options = inv, options

    def option(self, key, default=None):
        return self.options.get(key, default)


def test_the_step_plans_one_command_per_node_and_names_node1():
    inv = inventory.parse(four_nodes())
    run, step = Run(inv), FabricMesh()
    probes = step.cluster_probes(unmeshed(inv), run)
    plan = json.loads(probes["node0"].argv[2])
    assert set(probes) == {"node0", "node1", "node2", "node3"}
    assert plan["port"] == inv.ports.mesh and len(plan["rounds"]) == 3
    # a partner may start its push a whole handshake late: the round outlasts that and the push
    assert plan["round_limit"] > plan["deadline"] + plan["seconds"]
    assert probes["node0"].timeout > schedule_seconds(inv, 4) == 3 * plan["round_limit"]
    found = meshed(answers(four_node_rates("node1")))
    problems = step.cluster_problems(found, run)
    assert {node for node, _, _ in problems} == {"node1"} and len(problems) == 6
    assert all("Gbit/s" in text and "every link of node1" in text for _, _, text in problems)


def test_a_node_whose_program_failed_is_named_alone():
    inv = inventory.parse(four_nodes())
    docs = answers(four_node_rates())
    docs["node2"] = {"error": "cannot listen on 10.0.0.3:8953: [Errno 98] Address in use"}
    assert FabricMesh().cluster_problems(meshed(docs), Run(inv)) == [
        ("node2", "fabric", "cannot listen on 10.0.0.3:8953: [Errno 98] Address in use")]


def test_one_node_has_no_mesh():
    inv = inventory.parse(four_nodes())
    assert FabricMesh().cluster_probes({"node0": FabricMeshFacts("")}, Run(inv)) == {}


def test_the_figures_kept_name_every_link_the_slow_ones_and_no_ib():
    inv = inventory.parse(four_nodes())
    found = meshed(answers(four_node_rates("node1")))
    detail = FabricMesh().cluster_detail(found, Run(inv))["fabric"]
    assert len(detail["links"]) == 12 and detail["ib_measured"] is False
    assert {"a": "node0", "b": "node1", "gbps": 0.2} in detail["links"]
    assert sorted((lk["a"], lk["b"]) for lk in detail["slow"]) == sorted(
        [("node1", n) for n in ("node0", "node2", "node3")]
        + [(n, "node1") for n in ("node0", "node2", "node3")])
    assert detail["slow_nodes"] == ["node1"]
    head_state = {"steps": {"fabric-mesh": {"status": "ok", "detail": {"fabric": detail}}}}
    assert kept(head_state) == detail and kept({"steps": {}}) is None
    doc = certificate.build("up", "c", {"head": {}, "fabric": detail}, verify={}, now=0)
    assert doc["fabric"] == detail


def test_a_mesh_that_did_not_run_keeps_nothing():
    inv = inventory.parse(four_nodes())
    assert FabricMesh().cluster_detail(unmeshed(inv), Run(inv)) is None


def test_up_warns_of_a_link_slow_against_the_others_and_stops_on_the_floor_or_nothing():
    inv = inventory.parse(four_nodes())
    up = FabricMesh({"unless_serving": True, "relative_is_warning": True})
    docs = answers(four_node_rates("node1"))
    found = meshed(docs)
    assert up.cluster_problems(found, Run(inv)) == []
    warned = [ln for ln in up.closing_lines(Run(inv), found) if ln.startswith("warning: ")]
    assert len(warned) == 6 and all("node1" in ln and "0.20 Gbit/s" in ln for ln in warned)
    assert FabricMesh().cluster_problems(found, Run(inv))          # check --fabric still fails
    floor = inventory.parse(four_nodes(fabric={"min_gbps": 1}))
    assert {n for n, _, _ in up.cluster_problems(found, Run(floor))} == {"node1"}
    docs["node0"]["received"].pop("node1")                         # node1->node0 carried nothing
    assert [t for _, _, t in up.cluster_problems(meshed(docs), Run(inv))] == [
        "link node1->node0: nothing measured (node0 received nothing from node1)"]

"""`status` for people: the cluster's state first, one line per node within 100 columns (32
nodes are 32 lines), step detail only with --steps, and only the steps the engine runs."""

from __future__ import annotations

from k3deploy.cli import status_cmd, status_view
from k3deploy.cluster import inventory
from k3deploy.core.units import GB
from k3deploy.facts.guard import GuardState
from k3deploy.steps import guard as guard_step
from tests.unit.invdata import four_nodes

ORDER = ["preflight", "nvme", "download-start", "image", "download", "guard-stop", "launch",
         "wait", "verify", "guard"]


def node(rank: int, *, running: bool = True, state: str = "done", status: str = "ok") -> dict:
    gpus = [{"name": "NVIDIA H100 80GB HBM3", "total_mib": 81559, "used_mib": 70656}] * 8
    steps = {s: {"status": status if s == "download" else "ok", "finished": 100 + i}
             for i, s in enumerate(ORDER)}
    return {"rank": rank, "replaced": False, "torn_down": None, "state": steps,
            "live": {"reachable": True, "incident": None, "gpus": gpus, "guard": "watching",
                     "container": {"status": "running" if running else "exited",
                                   "running": running, "exit_code": 0 if running else 137},
                     "download": {"state": state, "bytes_done": 702 * GB, "bytes_total": 1560 * GB,
                                  "shards_done": 43, "shards_total": 96, "hub_bytes": 390 * GB,
                                  "peer_bytes": 312 * GB}}}


def doc(n: int, **kw) -> dict:
    nodes = {f"kimi-k3-worker-{i:02d}": node(i, **kw) for i in range(n)}
    return {"cluster": {"name": "k3-h100-32x8", "state": "serving", "incident": None},
            "nodes": nodes, "run_active": False, "cost": None}


def test_four_nodes_one_line_each_within_100_columns():
    lines = status_view.render(doc(4), ORDER)
    print("\n".join(lines))
    assert lines[0] == "cluster k3-h100-32x8: serving"
    assert lines[1] == ("  4 nodes, engines running 4/4, weights done 4/4, Hub bytes 1.00x the "
                        "repo, guards watching 4/4")
    header = next(i for i, ln in enumerate(lines) if ln.startswith("rank "))
    rows = lines[header + 1:]
    assert len(rows) == 4 and all(len(ln) <= 100 for ln in lines), lines
    assert rows[0].split() == ["0", "kimi-k3-worker-00", "running", "done", "43/96", "watching",
                               "69/80", "GiB", "x8", "last:", "guard", "ok"]


def test_thirty_two_nodes_stay_one_line_each():
    lines = status_view.render(doc(32, running=False, state="running", status="failed"), ORDER)
    header = next(i for i, ln in enumerate(lines) if ln.startswith("rank "))
    rows = lines[header + 1:]
    assert len(rows) == 32 and all(len(ln) <= 100 for ln in lines)
    assert "exited 137" in rows[5] and " 45% 43/96 " in rows[5]
    assert "failed: download" in rows[5]


def test_steps_detail_only_with_steps_grouped_by_status():
    plain = status_view.render(doc(4), ORDER)
    assert not any(ln.startswith("steps:") for ln in plain)
    d = doc(8)
    d["nodes"]["kimi-k3-worker-03"]["state"]["launch"]["status"] = "failed"
    detail = status_view.render(d, ORDER, steps=True)
    launch = next(ln for ln in detail if ln.strip().startswith("launch"))
    assert launch.split() == ["launch", "ok", "7", "nodes;", "failed", "kimi-k3-worker-03"]
    assert "  kimi-k3-worker-00 done 45% 43/96 hub 390.00 GB peers 312.00 GB" in detail
    assert all(len(ln) <= 100 for ln in detail)


def test_an_incident_reads_as_lines_under_the_state():
    d = doc(4)
    d["cluster"] = {"name": "c", "state": "stopped-by-guard", "since": "2026-12-01T10:00:00Z",
                    "incident": {"failure": {"cause": "rank 2 (node2): engine exited with code "
                                             "137", "at": "2026-12-01T09:59:58Z"},
                                 "seen_by": "node2"}}
    lines = status_view.render(d, ORDER)
    assert lines[0] == "cluster c: stopped by the guard since 2026-12-01T10:00:00Z"
    assert lines[1].startswith("  first failure: rank 2 (node2): engine exited with code 137")
    assert lines[2] == "  `k3deploy up` brings the group back"
    d["cluster"]["incident"]["failure"]["cause"] = (
        "rank 1 (node1): unreachable; its guard gave no answer for 21s (timed out)")
    lines = status_view.render(d, ORDER)
    assert lines[1:3] == ["  first failure: rank 1 (node1): unreachable; its guard gave no answer "
                          "for 21s (timed out) at", "    2026-12-01T09:59:58Z (seen by node2)"]
    assert all(len(ln) <= 100 for ln in lines)


def test_ray_cluster_is_shown_for_vllm_over_ray_only():
    steps = ["preflight", "ray-cluster", "launch"]
    assert status_cmd.applicable(steps, _inv("sglang", 4)) == ["preflight", "launch"]
    assert status_cmd.applicable(steps, _inv("vllm", 2, "ray")) == steps
    assert status_cmd.applicable(steps, _inv("vllm", 2)) == ["preflight", "launch"]   # mp
    assert status_cmd.applicable(steps, _inv("vllm", 1)) == ["preflight", "launch"]


def _inv(kind: str, nodes: int, executor: str | None = None):
    from k3deploy.cluster import inventory as inventory_mod
    doc = {"cluster": "c", "model": {"repo": "moonshotai/Kimi-K3"},
           "engine": {"kind": kind, **({"executor": executor} if executor else {})},
           "gpu": {"model": "b200" if kind == "vllm" else "h100", "count": 8},
           "nodes": [{"name": f"n{i}", "address": f"10.0.0.{i + 1}",
                      "private_address": f"10.0.0.{i + 1}", "nic": "eth0"}
                     for i in range(nodes)]}
    return inventory_mod.parse(doc)


def test_guard_label():
    def label(found: dict, enabled: bool = True) -> str:
        # as status asks them: the guard's facts under their prefix, among the node's others
        found = {"incident": None, "guard.incident": None, **found}
        return status_cmd.guard_label(guard_step.looked(found, status_cmd.GUARD), enabled)
    state = GuardState(pid=7, digest="d", beat=100, phase="watching")
    alive = {"guard.guard_pids": (7,), "guard.guard_state": state, "guard.now": 110}
    assert label(alive) == "watching"
    assert label({**alive, "guard.now": 1000}) == "stale"
    assert label({"guard.guard_pids": (), "guard.guard_state": None, "guard.now": 110}) == \
        "not running"
    assert label({**alive, "guard.guard_pids": (), "guard.guard_state": GuardState(
        pid=7, digest="d", beat=100, phase="fired")}) == "fired"
    assert label(alive, False) == "off"


def test_status_shows_the_ray_steps_for_vllm_over_ray_only():
    steps = list(status_cmd.STEPS)
    sglang = status_cmd.applicable(steps, inventory.parse(four_nodes()))
    def vllm_with(executor: str) -> list[str]:
        return status_cmd.applicable(steps, inventory.parse(
            {"cluster": "b200", "engine": {"kind": "vllm", "executor": executor},
             "gpu": {"model": "b200", "count": 8},
             "nodes": [{"name": f"node{i}", "address": f"10.0.0.{10 + i}"} for i in range(2)]}))
    vllm, mp = vllm_with("ray"), vllm_with("mp")
    assert not {"ray-cluster", "dry-fire-ray-cluster"} & set(sglang)
    assert {"ray-cluster", "dry-fire-ray-cluster", "dry-fire-stop"} <= set(vllm)
    assert not {"ray-cluster", "dry-fire-ray-cluster"} & set(mp) and "dry-fire-stop" in mp
    assert "dry-fire-stop" in sglang

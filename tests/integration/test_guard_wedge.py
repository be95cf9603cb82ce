"""A group that hangs, not one that dies: the stand-in engines need every rank for every forward
step, so one rank stopped (SIGSTOP: alive, its port still accepting) hangs the group. The guard
sees no rank advancing with work outstanding for `guard.wedge_seconds` and stops every rank,
naming the wedged one; a slow prefill that advances is left alone. The relaunch after an
incident starts warm: the engines' compile caches live on NVMe, sealed after verify; a corrupt
one is never loaded. Last, a node reclaimed while the cluster serves and replaced by a fresh
machine: `up` serves again, everything the new node needs from its peers. One 4x8 testbed, a
short wedge_seconds, a stand-in compile of COMPILE_SECONDS."""

from __future__ import annotations

import json
import threading
import time

import pytest
from guard_probe import (all_stopped_within, api_key, ask, guard_cpu_seconds, incident,
                         serving_again, swallow)
from tbfixture import testbed

from k3run import k3, out

pytestmark = pytest.mark.integration

WEDGE_SECONDS = 12
COMPILE_SECONDS = 3
CACHE = "/mnt/nvme/.k3deploy/compile-cache"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with testbed(tmp_path_factory.mktemp("wedge"), nodes=4, compile_seconds=COMPILE_SECONDS) as tb:
        tb.inventory.write_text(tb.inventory.read_text() +
                                f"guard: {{enabled: true, wedge_seconds: {WEDGE_SECONDS}}}\n")
        # Without the dry-fire, which would compile and seal the caches before the real launch:
        # the relaunch tests below need a cold first launch to tell warm from cold.
        first = k3("up", "-i", str(tb.inventory), "--no-dry-fire")
        assert first.returncode == 0, out(first)
        for node in tb.nodes:  # cold: nothing cached yet
            assert "[stand-in] kernel caches miss" in engine_log(tb, node), node
        yield tb


def engine_log(tb, node: str) -> str:
    return tb.ssh(node, "docker logs k3 2>&1 | grep -F '[stand-in] kernel'").stdout


def assert_warm(tb) -> None:
    for node in tb.nodes:
        said = engine_log(tb, node)
        assert "kernel caches hit" in said and "miss" not in said, (node, said)


def last_certificate(tb) -> dict:
    found = sorted((tb.inventory.parent / ".k3deploy").glob("*/certificates/*.json"))
    return json.loads(found[-1].read_text())


def wedged_and_stopped(tb, node: str, rank: int) -> None:
    tb.fault("wedge-engine", node)
    all_stopped_within(tb, tb.nodes, WEDGE_SECONDS + 15, time.monotonic())
    for name in tb.nodes:
        found = incident(tb, name)
        assert found and found["failure"]["kind"] == "wedged", (name, found)
        assert (found["failure"]["node"], found["failure"]["rank"]) == (node, rank), found
        assert found["wedge"]["ranks"] == [{"node": node, "rank": rank}], found["wedge"]
        assert f"rank {rank} ({node}) stopped answering its metrics" in found["failure"]["cause"]
    table = k3("status", "-i", str(tb.inventory), timeout=120)
    assert table.returncode == 1 and "stopped by the guard since" in table.stdout, out(table)
    assert f"rank {rank} ({node}): no progress" in table.stdout, out(table)


def test_a_wedged_worker_stops_every_rank_and_is_named(cluster):
    serving_again(cluster)
    # Busy traffic while it wedges: the request in flight hangs at the head as in real life.
    key = api_key(cluster)
    hung = threading.Thread(target=lambda: swallow(ask, cluster, key, 4, 120), daemon=True)
    hung.start()
    wedged_and_stopped(cluster, "node2", 2)


def test_the_relaunch_is_warm_and_a_wedged_head_is_stopped_too(cluster):
    serving_again(cluster)  # relaunches after the wedged worker's incident
    assert_warm(cluster)
    relaunch = last_certificate(cluster)["bringup"]["relaunch"]
    assert relaunch["after"].startswith("rank 2 (node2): no progress"), relaunch
    assert 0 < relaunch["relaunch_seconds"] <= relaunch["incident_to_serving_seconds"]
    wedged_and_stopped(cluster, "node0", 0)


def test_a_slow_prefill_that_advances_is_not_a_wedge_and_the_guard_stays_cheap(cluster):
    tb = cluster
    serving_again(tb)  # relaunches after the wedged head's incident
    key = api_key(tb)
    cpu = {n: guard_cpu_seconds(tb, n) for n in tb.nodes}
    tb.fault("slow-prefill", "node1", "3")
    started = time.monotonic()
    try:
        # 40 words: 5 prefill chunks of 3 s each, longer than wedge_seconds in all.
        while time.monotonic() - started < 20:
            assert ask(tb, key, 40) == 200
    finally:
        tb.fault("slow-prefill", "node1", "0")
    elapsed = time.monotonic() - started
    for node in tb.nodes:
        assert incident(tb, node) is None, (node, incident(tb, node))
        used = guard_cpu_seconds(tb, node) - cpu[node]
        assert used / elapsed < 0.01, (node, used, elapsed)


def test_a_node_reclaimed_and_replaced_while_serving_serves_again_from_peers(cluster):
    """The spot story, whole: the cluster serves; node3 is reclaimed and comes back as a fresh
    machine (an empty disk); `up` serves again and `verify` passes. The survivors' group
    cannot take a new rank, so the group is relaunched with the same ranks; node3 takes the
    image, its weight share and the compile cache from its peers (no registry pull, no Hub
    bytes of the checkpoint, no compile). One byte flipped in survivor node1's sealed cache on
    the way: found before its start, refilled from a peer, never loaded."""
    tb = cluster
    serving_again(tb)   # the slow-prefill test left it serving; this makes sure
    pulls = {n: d["registry_pulls"] for n, d in tb.stats()["nodes"].items()}
    hub_before = _hub_files(tb, "node3")
    flip = (f"f=$(ls {CACHE}/*/triton/k3tb-kernels/*.bin) && printf '\\377' | "
            "dd of=$f bs=1 seek=200 conv=notrunc status=none")
    assert tb.ssh("node1", flip).returncode == 0
    tb.fault("kill-node", "node3")
    tb.fault("revive-node", "node3")
    assert tb.ssh("node3", "docker images -q").stdout.strip() == ""   # a fresh disk
    began = time.monotonic()
    again = k3("up", "-i", str(tb.inventory), timeout=240)
    print(f"up after the replaced node3 took {time.monotonic() - began:.1f}s")
    assert again.returncode == 0, out(again)
    checked = k3("verify", "-i", str(tb.inventory), timeout=120)
    assert checked.returncode == 0, out(checked)
    # The engine would fail on a corrupt kernel ("device kernel image is invalid"): node1's was
    # found before its start and replaced by a peer's copy, node3 got one; nobody compiled.
    assert_warm(tb)
    for node in ("node1", "node3"):
        check = tb.ssh(node, f"python3 /mnt/nvme/.k3deploy/compile_cache_dir.py check {CACHE}/*")
        assert json.loads(check.stdout)["state"] == "complete", (node, check.stdout)
    assert {n: d["registry_pulls"] for n, d in tb.stats()["nodes"].items()} == pulls
    fetched = {f: b for f, b in _hub_files(tb, "node3").items() if b > hub_before.get(f, 0)}
    assert not [f for f in fetched if f.endswith(".safetensors")], fetched  # from peers
    assert sum(fetched.values()) < 0.01 * tb.stats()["hub"]["repo_bytes"], fetched
    for rank, node in enumerate(tb.nodes):   # the survivors kept their ranks
        cmd = json.loads(tb.ssh(node, "docker inspect k3").stdout)[0]["Config"]["Cmd"]
        assert cmd[cmd.index("--node-rank") + 1] == str(rank), (node, cmd)


def _hub_files(tb, node: str) -> dict[str, int]:
    files = tb.stats()["hub"]["by_node"].get(node, {}).get("files", {})
    return {path: doc["bytes"] for path, doc in files.items()}

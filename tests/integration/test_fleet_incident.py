"""A fleet's incidents (issue 54), on two groups of two nodes behind the real SMG on node0:
- a node of group g1 killed under a steady load through the router (streaming and not, several
  clients: scripts/fleetload.py): g1's guard takes g1 out of the router (SMG's admin API, from
  the node, no laptop) before it stops g1's ranks, within 10 s of the kill; no request fails
  that was not in flight at the kill; the node revived, `watch --restart 1` relaunches g1,
  verifies it and registers it again, ready;
- the router's process killed by hand (docker's restart policy brings it back empty, as
  dockerd does): `up` registers both groups again and relaunches neither;
- no serving or admin key in any process's argv, any log or any state file on the nodes (the
  laptop's state dir and the router's argv right after `up`: test_fleet_up.py).

The guards' peer_timeout is 5 s here: a vanished node is silence, and its group's guards call it
lost only after peer_timeout (20 s by default); 5 s leaves the guard's removal of the group
within the issue's 10 s. One testbed for the module, brought up by the first test. Needs root."""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request

import pytest
import yaml
from fleetload import Load
from guard_probe import Follow, incident
from tbfixture import testbed

from k3run import k3, out

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900),
              pytest.mark.skipif(os.geteuid() != 0, reason="the testbed needs root")]

MODEL = "moonshotai/Kimi-K3"
WORK = "/mnt/nvme/.k3deploy"
# where the keys may be on a node: the router's 0600 args file, the guards' 0600 admin key
# file, the engine's key file (node/apikey.py)
KEY_FILES = (f"{WORK}/router/router.json", f"{WORK}/guard/router-admin-key", f"{WORK}/secrets/")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    with testbed(tmp_path_factory.mktemp("fleet-incident"), nodes=4, groups=2, gpu="h200",
                 shard_bytes=100_000) as tb:
        with open(tb.inventory, "a") as fh:
            fh.write("guard: {enabled: true, peer_timeout: 5}\n")
        up = k3("up", "-i", str(tb.inventory), "--no-dry-fire")
        assert up.returncode == 0, out(up)
        yield tb


def secret(tb, name: str) -> str:
    cluster = yaml.safe_load(tb.inventory.read_text())["cluster"]
    return (tb.inventory.parent / ".k3deploy" / cluster / "secrets" / name).read_text().strip()


def base(tb) -> str:
    return f"http://{tb.address('node0')}:30000"


def workers(tb) -> dict[str, str]:
    """The router's worker list: group head's URL -> status."""
    req = urllib.request.Request(base(tb) + "/workers",
                                 headers={"Authorization": f"Bearer {secret(tb, 'router-admin-key')}"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        return {w["url"].rstrip("/"): w["status"] for w in json.loads(resp.read())["workers"]}


def url(tb, node: str) -> str:
    return f"http://{tb.address(node)}:8000"


def engines(tb) -> dict[str, str]:
    """Each node's engine container: its id and when it started."""
    return {n: tb.ssh(n, "docker inspect -f '{{.Id}} {{.State.StartedAt}}' k3").stdout.strip()
            for n in tb.nodes}


def sample_router(tb, stop: threading.Event, every: float = 0.5) -> list[tuple[float, dict]]:
    """GET /workers every `every` seconds in a thread until `stop`; the samples so far."""
    samples: list[tuple[float, dict]] = []

    def run():
        while not stop.is_set():
            try:
                samples.append((time.time(), workers(tb)))
            except OSError as err:
                samples.append((time.time(), {"error": str(err)}))
            stop.wait(every)

    threading.Thread(target=run, daemon=True).start()
    return samples


def test_a_killed_node_takes_its_group_out_of_the_router_and_watch_brings_it_back(fleet, wait_for):
    tb = fleet
    g0, g1 = url(tb, "node0"), url(tb, "node2")
    assert workers(tb) == {g0: "ready", g1: "ready"}
    # streaming and non-streaming in turn, several clients, no client retries (fleetload.py,
    # the load the roll's test and `scripts/bench --fleet` send); times on the wall clock
    load = Load(base=base(tb), key=secret(tb, "api-key"), model=MODEL, clients=3,
                max_tokens=64).__enter__()
    stop = threading.Event()
    samples = sample_router(tb, stop)
    try:
        wait_for(lambda: sum(1 for r in load.done() if r.error is None) >= 6, 60, "answers")
        killing = time.time()
        tb.fault("kill-node", "node3")
        killed = time.time()
        wait_for(lambda: workers(tb).get(g1) in (None, "draining"), 30, "g1 out of the router")
        time.sleep(8)   # the load goes on through g0 alone
    finally:
        load.stop()
        stop.set()
    out_at = next(t for t, seen in samples if t > killing and "error" not in seen
                  and seen.get(g1) in (None, "draining"))
    done = load.done()
    print(f"g1 out of the router {out_at - killing:.1f}s after the kill began; requests: "
          f"{len(done)} sent ({sum(1 for r in done if r.stream)} streaming), "
          f"{len(load.failed())} failed, "
          f"{sum(1 for r in done if r.started < killed < r.ended)} in flight at the kill")
    assert out_at - killing <= 10, samples
    assert all(seen.get(g0) == "ready" for t, seen in samples if "error" not in seen), samples
    assert {r.stream for r in done} == {True, False}
    failed = load.failed()
    assert all(r.started < killed for r in failed), (failed, killing, killed)
    assert sum(1 for r in done if r.started > out_at and r.error is None) >= 3, done
    record = incident(tb, "node2")
    assert record and record["failure"]["node"] == "node3", record
    assert record["router"].startswith(f"router: removed {g1}"), record
    wait_for(lambda: g1 not in workers(tb), 30, "g1's entry gone after its drain")

    tb.fault("revive-node", "node3")
    watch = Follow(tb, "--restart", "1")
    try:
        stopped = watch.wait("group g1: cluster", 120)
        assert "stopped by the guard" in watch.lines[stopped], watch.lines
        watch.wait("bring-up verified the endpoint again", 600, stopped)
        assert watch.proc.poll() is None, "\n".join(watch.lines)
    finally:
        watch.stop()
    wait_for(lambda: workers(tb) == {g0: "ready", g1: "ready"}, 60, "both groups ready")


def test_the_router_killed_by_hand_is_mended_by_up_without_relaunching_a_group(fleet, wait_for):
    tb = fleet
    g0, g1 = url(tb, "node0"), url(tb, "node2")
    wait_for(lambda: workers(tb) == {g0: "ready", g1: "ready"}, 60, "both groups ready")
    before = engines(tb)
    pid = tb.ssh("node0", "docker inspect -f '{{.State.Pid}}' k3-router").stdout.strip()
    assert pid.isdigit() and pid != "0", pid
    assert tb.ssh("node0", f"kill -9 {pid}").returncode == 0
    up = k3("up", "-i", str(tb.inventory), "--no-dry-fire")
    assert up.returncode == 0, out(up)
    print(out(up)[-1500:])
    assert "register group g0" in out(up) and "register group g1" in out(up), out(up)
    assert workers(tb) == {g0: "ready", g1: "ready"}
    assert engines(tb) == before


def test_a_watch_tick_mends_a_router_restarted_by_hand(fleet, wait_for):
    """No `up`: the router comes back empty (docker's restart policy), and the next watch tick
    registers the two serving groups again (cli/fleet_watch.mend), relaunching neither."""
    tb = fleet
    g0, g1 = url(tb, "node0"), url(tb, "node2")
    wait_for(lambda: workers(tb) == {g0: "ready", g1: "ready"}, 60, "both groups ready")
    before = engines(tb)
    watch = Follow(tb)
    try:
        watch.wait("fleet ", 60)   # its first look said the fleet's state
        pid = tb.ssh("node0", "docker inspect -f '{{.State.Pid}}' k3-router").stdout.strip()
        assert pid.isdigit() and pid != "0", pid
        assert tb.ssh("node0", f"kill -9 {pid}").returncode == 0
        watch.wait("register group g1", 90)
        wait_for(lambda: workers(tb) == {g0: "ready", g1: "ready"}, 60, "both groups ready again")
    finally:
        watch.stop()
    assert engines(tb) == before


def test_no_key_in_argv_logs_or_state_files_on_any_node(fleet):
    tb = fleet
    keys = {"api-key": secret(tb, "api-key"), "router-admin-key": secret(tb, "router-admin-key")}
    for node in tb.nodes:
        ps = tb.ssh(node, "ps -eww -o args").stdout
        logs = tb.ssh(node, "for c in $(docker ps -aq); do docker logs $c 2>&1; done").stdout
        for name, key in keys.items():
            assert key not in ps, (node, name)
            assert key not in logs, (node, name)
            found = tb.ssh(node, f"grep -rlF -f /dev/stdin {WORK} /tmp /var/log 2>/dev/null",
                           input=key + "\n").stdout   # the key on stdin, not in grep's argv
            stray = [p for p in found.split() if not p.startswith(KEY_FILES)]
            assert stray == [], (node, name, stray)
    # the laptop's state after an incident, a relaunch by watch and a router mended by up (its
    # state right after the first up: test_fleet_up.py)
    for path in (tb.inventory.parent / ".k3deploy").rglob("*"):
        if path.is_file() and path.parent.name != "secrets":
            text = path.read_text(errors="replace")
            assert not [n for n, k in keys.items() if k in text], path
    # the guards hold the admin key in their 0600 file (the fleet's groups only)
    for node in tb.nodes:
        mode = tb.ssh(node, f"stat -c %a {WORK}/guard/router-admin-key").stdout.strip()
        assert mode == "600", (node, mode)

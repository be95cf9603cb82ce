"""The serve-time guard on a 4x8 H100 testbed: a dead rank (engine crash, vanished node,
partition) stops every rank within the bound, each node records the first failure, `status`
says so, and `up` brings the group back. The stand-in engines hang as real ones do when a peer
dies, so without the guard nothing would ever stop.

One testbed for the module; each test starts from a serving cluster (the `serving` fixture
brings it back with `up` when an earlier test left it stopped)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import string
import subprocess
import sys
import time

import pytest
from guard_probe import (GUARD, Follow, all_stopped_within, archived, chat, engine_running,
                         guard_cpu_seconds, guard_pids, incident, serving_again, set_load_seconds,
                         status, watching)
from tbfixture import testbed

from k3run import REPO, k3, out

pytestmark = pytest.mark.integration


PS_SEEN: list[str] = []  # every node's `ps` taken while guards ran: scanned for secrets


def snapshot_ps(tb) -> None:
    PS_SEEN.extend(tb.ssh(n, "ps -eo args").stdout for n in tb.nodes)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A Hub that wants a token, so the secret scan at the end also looks for the HF token."""
    tmp = tmp_path_factory.mktemp("guard")
    token = "hf_" + "".join(secrets.choice(string.ascii_letters) for _ in range(34))
    (tmp / "hub-token").write_text(token)
    os.environ["HF_TOKEN"] = token  # every k3deploy this module starts inherits it
    try:
        with testbed(tmp, nodes=4, hub_token_file=str(tmp / "hub-token")) as tb:
            first = k3("up", "-i", str(tb.inventory))
            assert first.returncode == 0, out(first)
            yield tb
    finally:
        os.environ.pop("HF_TOKEN", None)


@pytest.fixture
def serving(cluster):
    serving_again(cluster)
    snapshot_ps(cluster)
    return cluster


def test_no_false_positive_while_serving_and_the_guard_stays_cheap(serving):
    tb = serving
    key = next((tb.inventory.parent / ".k3deploy").glob("*/secrets/api-key")).read_text().strip()
    cpu = {n: guard_cpu_seconds(tb, n) for n in tb.nodes}
    started = time.monotonic()
    answered = 0
    # Steady traffic, a request every half second, over thirty of the guard's looks
    # (guard.poll_seconds 1): a CPU share of 1% over 30 s is 0.3 s, thirty clock ticks.
    while time.monotonic() - started < 30:
        assert chat(tb, key) == 200
        answered += 1
        time.sleep(0.5)
    elapsed = time.monotonic() - started
    assert answered > 25
    for node in tb.nodes:
        assert incident(tb, node) is None, node
        assert engine_running(tb, node), node
        used = guard_cpu_seconds(tb, node) - cpu[node]
        assert used / elapsed < 0.01, (node, used, elapsed)  # under 1% of one core


def test_worker_engine_killed_stops_every_rank_and_up_restores(serving):
    tb = serving
    assert tb.ssh("node2", "docker kill k3").returncode == 0
    killed = time.monotonic()
    all_stopped_within(tb, tb.nodes, 15, killed)
    for node in tb.nodes:
        found = incident(tb, node)
        assert found, node
        assert (found["failure"]["node"], found["failure"]["rank"]) == ("node2", 2), found
        assert found["failure"]["kind"] == "exited" and found["failure"]["exit_code"] == 137
        assert found["recorded_by"] == node and found["seen_by"] == "node2"
        assert found["log_tail"] and len(found["log_tail"]) <= 200
    table = k3("status", "-i", str(tb.inventory), timeout=120)
    assert table.returncode == 1, out(table)
    assert "stopped by the guard since" in table.stdout
    assert "rank 2 (node2): engine exited with code 137" in table.stdout
    code, doc = status(tb)
    assert code == 1 and doc["cluster"]["state"] == "stopped-by-guard"
    assert doc["cluster"]["incident"]["failure"]["rank"] == 2

    # Back with `up`, one rank loading slowly (25 s, longer than peer_timeout): `up` stops the
    # spent guards before the relaunch (alive, they would hand their old incident to the new
    # guards) and starts new ones after verify, so nothing is raised while it loads.
    set_load_seconds(tb, "node1", 25)
    try:
        again = k3("up", "-i", str(tb.inventory))
    finally:
        set_load_seconds(tb, "node1", 2.0)
    assert again.returncode == 0, out(again)
    code, doc = status(tb)
    assert code == 0, doc["cluster"]
    assert (doc["cluster"]["state"], doc["cluster"]["incident"]) == ("serving", None), \
        doc["cluster"]
    for node in tb.nodes:
        assert incident(tb, node) is None and len(archived(tb, node)) == 1, node
    snapshot_ps(tb)


def test_head_engine_killed_after_the_laptop_died_right_after_up(serving, wait_for):
    tb = serving
    before = {n: guard_pids(tb, n) for n in tb.nodes}
    # A config change makes `up` replace every guard; the laptop dies as soon as they run.
    inv = tb.inventory.read_text()
    tb.inventory.write_text(inv + "guard: {enabled: true, peer_timeout: 15}\n")
    try:
        laptop = subprocess.Popen([sys.executable, "-m", "k3deploy", "up", "-i",
                                   str(tb.inventory)], cwd=REPO, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            wait_for(lambda: all(guard_pids(tb, n) and guard_pids(tb, n) != before[n]
                                 for n in tb.nodes), 120, "new guards on every node")
        finally:
            os.killpg(laptop.pid, signal.SIGKILL)
            laptop.wait()
        wait_for(lambda: all(watching(tb, n) for n in tb.nodes), 30, "the new guards watching")
        assert tb.ssh("node0", "docker kill k3").returncode == 0
        all_stopped_within(tb, tb.nodes, 15, time.monotonic())
        for node in tb.nodes:
            found = incident(tb, node)
            assert (found["failure"]["node"], found["failure"]["rank"],
                    found["failure"]["exit_code"]) == ("node0", 0, 137), (node, found)
    finally:
        tb.inventory.write_text(inv)


def test_partition_stops_both_sides(serving):
    tb = serving
    tb.fault("partition", "node1")
    since = time.monotonic()
    try:
        rest = ["node0", "node2", "node3"]
        all_stopped_within(tb, rest, 30, since)
        for node in rest:
            failure = incident(tb, node)["failure"]
            assert (failure["node"], failure["kind"]) == ("node1", "unreachable"), failure
    finally:
        tb.fault("heal", "node1")
    # Its guard stopped it: it reached no peer. Its own clock runs apart from the others', so it
    # gets the same bound from the partition, not the moment the others were seen stopped.
    all_stopped_within(tb, ["node1"], 30, since)
    failure = incident(tb, "node1")["failure"]
    assert failure["node"] == "node1" and "reaches none of its 3 peers" in failure["cause"]


def test_watch_restarts_once_then_gives_up_naming_both_incidents(serving):
    tb = serving
    watch = Follow(tb, "--restart", "1")
    try:
        first = watch.wait(": serving", 60)
        assert tb.ssh("node2", "docker kill k3").returncode == 0
        stopped = watch.wait("stopped by the guard", 60, first)
        assert "rank 2 (node2): engine exited with code 137" in watch.lines[stopped]
        assert watch.seen("restart 1 of 1", stopped) is not None
        back = watch.wait(": serving", 180, stopped)
        assert watch.seen("bring-up verified the endpoint again", stopped) is not None
        assert all(engine_running(tb, n) for n in tb.nodes)
        assert watch.proc.poll() is None
        assert tb.ssh("node1", "docker kill k3").returncode == 0
        watch.wait("giving up", 90, back)
        code = watch.proc.wait(timeout=30)
        text = "\n".join(watch.lines[back:])
        assert code == 1, text
        assert "incident 1: rank 2 (node2): engine exited with code 137" in text
        assert "incident 2: rank 1 (node1): engine exited with code 137" in text
    finally:
        watch.stop()


def test_ctrl_c_ends_watch_at_once_and_leaves_the_guards(serving):
    tb = serving
    watch = Follow(tb)
    try:
        watch.wait(": serving", 60)
        pids = {n: guard_pids(tb, n) for n in tb.nodes}
        os.killpg(watch.proc.pid, signal.SIGINT)
        started = time.monotonic()
        watch.proc.wait(timeout=10)
        assert time.monotonic() - started < 5 and watch.proc.returncode == 130
        # the reader thread may take the last line a moment after the process ended
        watch.wait("the guards keep running", 10)
        assert {n: guard_pids(tb, n) for n in tb.nodes} == pids
    finally:
        watch.stop()


def test_down_while_serving_is_no_incident_and_leaves_nothing(serving):
    tb = serving
    archives = {n: archived(tb, n) for n in tb.nodes}
    down = k3("down", "-i", str(tb.inventory))
    assert down.returncode == 0, out(down)
    # Guards first: only a live guard writes an incident, so once none is left on any node
    # the incident check below is final (no sleep guessing how long a guard takes to fire).
    for node in tb.nodes:
        assert guard_pids(tb, node) == [], node
    for node in tb.nodes:
        assert incident(tb, node) is None and archived(tb, node) == archives[node], node
        assert tb.ssh(node, "docker ps -q").stdout.strip() == "", node
    code, doc = status(tb)
    assert code == 1 and doc["cluster"]["state"] == "down"


def test_no_guard_secret_api_key_or_token_anywhere(cluster, tmp_path):
    tb = cluster
    state = tb.inventory.parent / ".k3deploy"
    secret_file = next(state.glob("*/secrets/guard-secret"))
    assert oct(secret_file.stat().st_mode & 0o777) == "0o600"
    secret = secret_file.read_text().strip()
    assert len(secret) >= 32
    key = next(state.glob("*/secrets/api-key")).read_text().strip()
    logs = k3("logs", "-i", str(tb.inventory), "--out", str(tmp_path / "logs"))
    assert logs.returncode == 0, out(logs)
    assert any(p.name.endswith("-guard.log") for p in (tmp_path / "logs").iterdir())
    places = {"ps": "\n".join(PS_SEEN), "stand-in argv": json.dumps(tb.stats()["nodes"]),
              "logs output": out(logs)}
    files = [p for p in [*state.rglob("*"), *(tmp_path / "logs").rglob("*")]
             if p.is_file() and p.parent.name != "secrets"]
    places |= {str(p): p.read_text(errors="replace") for p in files}
    for node in tb.nodes:
        assert tb.ssh(node, ["stat", "-c", "%a", f"{GUARD}/secret"]).stdout.strip() == "600"
        assert tb.ssh(node, ["cat", f"{GUARD}/secret"]).stdout.strip() == secret
        places[f"{node}:/mnt/nvme/.k3deploy"] = tb.ssh(
            # The engines' compile caches are their binary kernels, not text k3deploy writes.
            node, f"find /mnt/nvme/.k3deploy -path '*/secrets' -prune -o -path {GUARD}/secret "
            "-prune -o -path '*/compile-cache' -prune -o -type f -exec cat {} +").stdout
    assert [w for w, text in places.items() if secret in text] == []
    assert [w for w, text in places.items() if key in text] == []
    token = os.environ["HF_TOKEN"]
    assert [w for w, text in places.items() if token in text] == []
    assert all(tb.stats()["hub"]["by_node"][n]["authorized_requests"] > 0 for n in tb.nodes)


def test_kill_node_of_a_worker_is_unreachable_and_the_rest_stop(serving):
    tb = serving
    tb.fault("kill-node", "node3")
    rest = ["node0", "node1", "node2"]
    all_stopped_within(tb, rest, 30, time.monotonic())
    for node in rest:
        found = incident(tb, node)
        assert (found["failure"]["node"], found["failure"]["kind"]) == ("node3", "unreachable")
        assert found["failure"]["rank"] == 3 and found["log_tail"] is None
    code, doc = status(tb)
    assert code == 3 and doc["cluster"]["state"] == "stopped-by-guard"
    # The reclaimed node comes back as a fresh machine (new machine-id and boot-id): `up`
    # re-downloads what it lacks (its peers still have every file), relaunches the group head
    # first and replaces the spent guards; the incident moves to the archive.
    tb.fault("revive-node", "node3")
    again = k3("up", "-i", str(tb.inventory))
    assert again.returncode == 0, out(again)
    code, doc = status(tb)
    assert code == 0 and doc["cluster"]["state"] == "serving", doc["cluster"]
    for node in rest:
        assert incident(tb, node) is None and archived(tb, node), node

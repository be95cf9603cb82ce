"""Preflight's port check: its node side (remote/portcheck.py mesh) on loopback, two "nodes"
in one network namespace told apart by the address each is probed at; then the whole check
against a testbed node behind a firewall."""

import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tbfixture import testbed

import k3deploy.remote
from k3run import changing_calls, k3, out

pytestmark = pytest.mark.integration

SCRIPT = Path(k3deploy.remote.__file__).parent / "portcheck.py"


def free_ports(n: int) -> list[int]:
    """n distinct ports, held until all are chosen: a port freed at once can be handed out
    again by the next bind (a duplicate listens as "busy"), and the mesh binds 0.0.0.0."""
    held = [socket.socket() for _ in range(n)]
    try:
        for s in held:
            s.bind(("0.0.0.0", 0))
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()


def mesh(seconds, me, ports, targets) -> subprocess.Popen:
    argv = [sys.executable, str(SCRIPT), "mesh", str(seconds), me, *map(str, ports), "--",
            *targets]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)


def finish(proc) -> dict:
    out, _ = proc.communicate(timeout=120)
    return json.loads(out.strip().splitlines()[-1])


def test_a_peer_whose_traffic_leaves_by_another_address_still_counts():
    """Each node is probed at its own 127.0.0.x, but connects from 127.0.0.1 (the loopback
    route's source): by source address neither would see the other, and both would listen
    until the deadline."""
    pa, pb = free_ports(2)
    started = time.monotonic()
    a = mesh(60, "127.0.0.2", [pa], [f"127.0.0.3:{pb}"])
    b = mesh(60, "127.0.0.3", [pb], [f"127.0.0.2:{pa}"])
    found_a, found_b = finish(a), finish(b)
    took = time.monotonic() - started
    assert found_a == {"ports": {str(pa): "listening"}, "probes": {f"127.0.0.3:{pb}": True}}
    assert found_b == {"ports": {str(pb): "listening"}, "probes": {f"127.0.0.2:{pa}": True}}
    assert took < 30, took   # both ended when the other got through, not at the 60 s deadline


def test_a_stray_client_does_not_end_the_listening():
    """A connection that does not name itself (an engine retrying its rendezvous) is no
    peer: the node keeps listening for the one it waits for, until the deadline."""
    (pa,) = free_ports(1)
    started = time.monotonic()
    a = mesh(4, "127.0.0.2", [pa], ["127.0.0.3:9"])   # the peer never comes
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.2", pa), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    found = finish(a)
    assert time.monotonic() - started >= 3.5
    assert found["ports"] == {str(pa): "listening"}
    assert found["probes"]["127.0.0.3:9"] is not True


def test_a_node_behind_a_firewall_is_named_by_the_nodes_that_cannot_reach_it(tmp_path):
    """node0 takes only SSH in (a cloud security group left at its default): preflight must
    say so before launch, since NCCL and Gloo hang on a partly open range instead of failing."""
    with testbed(tmp_path, nodes=2, gpu="b300") as tb:   # 2x8 H100 would not fit the model
        tb.fault("firewall", "node0")
        check = k3("check", "-i", str(tb.inventory), "--log-json")
        assert check.returncode == 1, out(check)
        rows = [json.loads(line) for line in check.stderr.splitlines()
                if '"run.problem"' in line]
        assert [(r["node"], r["check"]) for r in rows] == [("node1", "ports")], out(check)
        head = tb.address("node0")
        assert re.search(rf"cannot reach {re.escape(head)}:\d+ \(", rows[0]["problem"]), rows
        assert "open the full TCP range between the nodes" in rows[0]["problem"]
        assert changing_calls(tb.stats()) == []
        tb.fault("heal", "node0")
        again = k3("check", "-i", str(tb.inventory))
        assert again.returncode == 0, out(again)


def test_more_probes_than_run_at_once_and_a_late_peer_all_get_through():
    """One node listens on 70 ports (more than portcheck.PARALLEL probes in flight); its peer
    starts a second later, so the first node's probe is refused and tried again."""
    *many, pb = free_ports(71)
    started = time.monotonic()
    a = mesh(60, "127.0.0.2", many, [f"127.0.0.3:{pb}"])
    time.sleep(1.0)  # the point: b's listener is not up when a first probes it
    b = mesh(60, "127.0.0.3", [pb], [f"127.0.0.2:{p}" for p in many])
    found_a, found_b = finish(a), finish(b)
    assert found_a["probes"] == {f"127.0.0.3:{pb}": True}
    assert found_b["probes"] == {f"127.0.0.2:{p}": True for p in many}
    assert set(found_a["ports"].values()) == {"listening"}
    assert time.monotonic() - started < 30


def test_a_peer_that_never_listens_is_refused_at_the_deadline():
    pa, never = free_ports(2)
    started = time.monotonic()
    found = finish(mesh(2, "127.0.0.2", [pa], [f"127.0.0.3:{never}"]))
    assert found["probes"] == {f"127.0.0.3:{never}": "Connection refused"}
    assert 1.5 <= time.monotonic() - started < 20

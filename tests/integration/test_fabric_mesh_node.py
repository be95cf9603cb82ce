"""The mesh's node program (remote/fabric_mesh.py) on loopback: each "node" a process on its
own 127.0.0.x, all on one port. A round starts by a handshake, so a node whose program starts
seconds after the others (a slow SSH round trip) is waited for instead of measured as nothing."""

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import k3deploy.remote
from k3deploy.cluster import mesh_plan

pytestmark = pytest.mark.integration

SCRIPT = Path(k3deploy.remote.__file__).parent / "fabric_mesh.py"
LATE = 3.0   # the late node's start: three times the old clock-based gap between rounds


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def addr(name: str) -> str:
    return f"127.0.0.{2 + int(name.removeprefix('node'))}"


def plan(name: str, partners: list, port: int, deadline: float = 10.0,
         seconds: float = 1.0) -> str:
    rounds = [None if p is None else [p, addr(p)] for p in partners]
    return json.dumps({"me": name, "listen": addr(name), "port": port, "rounds": rounds,
                       "seconds": seconds, "deadline": deadline,
                       "round_limit": deadline + seconds + 2.0, "gap": 1.0})


def start(name: str, partners: list, port: int, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(SCRIPT), plan(name, partners, port, **kw)],
                            stdout=subprocess.PIPE, text=True)


def finish(procs: dict) -> dict:
    found = {}
    try:
        for name, proc in procs.items():
            found[name] = json.loads(proc.communicate(timeout=120)[0].strip().splitlines()[-1])
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return found


def mesh(names: list[str], late: str, port: int) -> dict:
    partners = mesh_plan.partners(names)
    procs = {n: start(n, partners[n], port) for n in names if n != late}
    time.sleep(LATE)
    procs[late] = start(late, partners[late], port)
    return finish(procs)


def test_a_node_that_starts_late_is_waited_for_and_every_link_is_measured():
    names = [f"node{i}" for i in range(4)]
    found = mesh(names, "node2", free_port())
    assert all(not f["errors"] for f in found.values()), found
    links = mesh_plan.links(found, names)
    assert len(links) == 12
    assert all(lk.gbps and lk.gbps > 0 for lk in links), links


def test_a_partner_that_never_comes_is_given_up_after_the_deadline():
    port = free_port()
    alone = finish({"node0": start("node0", ["node1"], port, deadline=2.0)})["node0"]
    assert alone["received"] == {} and alone["sent"] == {}
    assert "node1" in alone["errors"], alone
    link = mesh_plan.links({"node0": alone}, ["node0", "node1"])[0]
    assert link.gbps is None and link.error == alone["errors"]["node1"]


def test_a_sender_behind_hears_late_and_no_stream_overlaps_the_next_round():
    """node0 gives node1 up in round 0 (1 s) and measures round 1 with node2 (4 s); node1
    starts in the middle of it: its round-0 push is answered "late", so node0 counts node2's
    stream alone."""
    port = free_port()
    procs = {"node0": start("node0", ["node1", "node2"], port, deadline=1.0, seconds=4.0),
             "node2": start("node2", [None, "node0"], port, deadline=5.0, seconds=4.0)}
    time.sleep(LATE)
    procs["node1"] = start("node1", ["node0", None], port, deadline=1.0, seconds=4.0)
    found = finish(procs)
    assert "past this round" in found["node1"]["errors"]["node0"], found
    assert set(found["node0"]["received"]) == {"node2"}, found
    assert found["node0"]["received"]["node2"]["bytes"] > 0
    assert found["node2"]["received"]["node0"]["bytes"] > 0
    assert set(found["node0"]["errors"]) == {"node1"} and not found["node2"]["errors"]

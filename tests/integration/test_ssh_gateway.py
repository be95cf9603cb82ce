"""Nodes behind one SSH gateway (issue 53, item 4): some providers hand out SSH as one gateway
host with a port per machine (`ssh -p 40123 root@gw...`). `scripts/testbed up --ssh-gateway`
puts every node's sshd behind one address (tb/gateway.py); the inventory names each node by that
address and its own port, its own address as its private address. Two such nodes come up,
verify and go down; every login went through the gateway, and nothing the nodes were told
names the gateway (they talk over their private addresses). With accept-new, the keys are
recorded as `[host]:port` lines that OpenSSH's own tools read back."""

import re
import subprocess
from pathlib import Path

import pytest
import yaml
from tbfixture import inventory_copy, testbed
from tb.sshcmd import KEY_FILE

from k3run import k3, out

pytestmark = pytest.mark.integration

SMALL = {"gpu": "b300", "ssh_gateway": True, "shards": 8, "shard_bytes": 2_000_000}


def logins_from(tb, address: str) -> int:
    """sshd's "Accepted publickey ... from ADDRESS" lines over all nodes (their init.log)."""
    pattern = re.compile(rf"Accepted publickey for \S+ from {re.escape(address)} port ")
    return sum(len(pattern.findall((tb.dir / "nodes" / n / "init.log").read_text()))
               for n in tb.nodes)


def gateway_of(tb) -> tuple[str, list[int]]:
    nodes = yaml.safe_load(tb.inventory.read_text())["nodes"]
    assert [n["private_address"] for n in nodes] == [tb.address(n) for n in tb.nodes]
    assert len({n["address"] for n in nodes}) == 1, nodes
    return nodes[0]["address"], [n["port"] for n in nodes]


def test_two_nodes_behind_one_gateway_come_up_verify_and_go_down(tmp_path):
    with testbed(tmp_path, nodes=2, **SMALL) as tb:
        gw, ports = gateway_of(tb)
        assert len(set(ports)) == 2 and gw not in {tb.address(n) for n in tb.nodes}
        inv = str(tb.inventory)
        host = tb.address("node0").rsplit(".", 1)[0] + ".1"   # the bridge: direct logins
        direct, through = logins_from(tb, host), logins_from(tb, gw)

        up = k3("up", "-i", inv)
        assert up.returncode == 0, out(up)
        assert f"endpoint: http://{tb.address('node0')}:8000/v1" in out(up), out(up)
        said = " ".join(out(up).split())   # the console wraps long lines at its width
        assert f"ssh -p {ports[0]} -N -L 8000:127.0.0.1:8000 root@{gw}" in said, said
        verify = k3("verify", "-i", inv)
        assert verify.returncode == 0, out(verify)
        chat = k3("chat", "-i", inv, "hello")   # the laptop shares the nodes' network here
        assert chat.returncode == 0 and "answers: hello" in out(chat), out(chat)
        down = k3("down", "-i", inv, "--out", str(tmp_path / "logs"))
        assert down.returncode == 0, out(down)

        assert logins_from(tb, host) == direct   # k3deploy never logged in past the gateway
        assert logins_from(tb, gw) > through
        calls = [c["argv"] for doc in tb.stats()["nodes"].values() for c in doc["calls"]]
        runs = [a for a in calls if a[:2] == ["docker", "run"]]
        assert runs and not [a for a in calls if any(gw in str(arg) for arg in a)], runs
        assert any(f"{tb.address('node0')}:20000" in " ".join(a) for a in runs), runs
        saved = sorted(p.name for p in (tmp_path / "logs").iterdir())
        assert {"node0-rank0-engine.log", "node1-rank1-engine.log"} <= set(saved), saved
        for node in tb.nodes:
            assert tb.ssh(node, "docker ps -a -q").stdout.strip() == ""


def keygen_find(name: str, known: Path) -> str:
    return subprocess.run(["ssh-keygen", "-F", name, "-f", str(known)], capture_output=True,
                          text=True).stdout


def test_init_with_accept_new_records_bracketed_lines_that_openssh_reads(tmp_path):
    # 40G of tmpfs costs nothing until written: init's inventory keeps the default room for
    # a 13 GB image (test_init.py)
    with testbed(tmp_path, nodes=2, disk="40G", **SMALL) as tb:
        gw, ports = gateway_of(tb)
        known = tmp_path / "fresh_known_hosts"
        known.write_text("")
        refused = k3("check", "-i", str(inventory_copy(tb, tmp_path, known_hosts=str(known))))
        said = " ".join(out(refused).split())
        assert refused.returncode != 0 and f"host key of [{gw}]:{ports[0]} is unknown" in said, said
        assert f"ssh-keyscan -p {ports[0]} {gw}" in said

        inv = tmp_path / "cluster.yaml"   # both forms of a port on the command line
        init = k3("init", f"[{gw}]:{ports[0]}", f"{gw}:{ports[1]}", "-o", str(inv),
                  "--key", str(tb.dir / KEY_FILE), "--known-hosts", str(known),
                  "--hub-endpoint", tb.endpoint, "--accept-new-host-keys")
        assert init.returncode == 0, out(init)
        nodes = yaml.safe_load(inv.read_text())["nodes"]
        assert [(n["name"], n["address"], n.get("port"), n["private_address"]) for n in nodes] \
            == [(n, gw, p, tb.address(n)) for n, p in zip(tb.nodes, ports)]
        lines = sorted(known.read_text().splitlines())
        assert [ln.split()[0] for ln in lines] == [f"[{gw}]:{p}" for p in sorted(ports)], lines
        assert set(lines) <= set((tb.dir / "known_hosts").read_text().splitlines())  # each its own key
        for port in ports:
            assert f"[{gw}]:{port} ssh-ed25519 " in keygen_find(f"[{gw}]:{port}", known)
        assert keygen_find(gw, known) == ""   # port 22 of the gateway is no node's
        login = subprocess.run(
            ["ssh", "-F", "/dev/null", "-p", str(ports[1]), "-i", str(tb.dir / KEY_FILE),
             "-o", f"UserKnownHostsFile={known}", "-o", "GlobalKnownHostsFile=/dev/null",
             "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", f"root@{gw}", "hostname"],
            capture_output=True, text=True, timeout=60)
        assert login.returncode == 0 and login.stdout.strip() == "node1", login.stderr

        check = k3("check", "-i", str(inv))   # read back by the transport, nothing added
        assert check.returncode == 0, out(check)
        assert sorted(known.read_text().splitlines()) == lines

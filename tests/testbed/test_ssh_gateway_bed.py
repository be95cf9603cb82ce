"""`scripts/testbed up --ssh-gateway`: one gateway address, a port per node, forwarded from a
namespace of the testbed's own; a node killed and revived is reached through it again; `down`
takes the gateway with it (the leftover check names a `k3tb<idx>-gateway` namespace and a
`k3tb<idx>gw` link)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tb.sshcmd import ssh_argv
from tbfixture import leftovers, read_state, testbed

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def through_gateway(tb, gateway: dict, node: str) -> subprocess.CompletedProcess:
    argv = ssh_argv(tb.dir, "root", gateway["address"], "hostname; echo $SSH_CLIENT",
                    port=gateway["ports"][node])
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def test_every_node_behind_one_address_a_port_each_and_gone_at_down(tmp_path):
    with testbed(tmp_path, nodes=3, shard_bytes=100_000, ssh_gateway=True) as tb:
        gateway = read_state(tb.dir)["gateway"]
        assert gateway["address"] == f"10.213.{tb.idx}.2"
        assert gateway["ports"] == {"node0": 40100, "node1": 40101, "node2": 40102}
        assert Path(f"/run/netns/k3tb{tb.idx}-gateway").exists()
        nodes = yaml.safe_load(tb.inventory.read_text())["nodes"]
        assert [(n["address"], n["port"], n["private_address"]) for n in nodes] == [
            (gateway["address"], gateway["ports"][n], tb.address(n)) for n in tb.nodes]
        for node in tb.nodes:
            said = through_gateway(tb, gateway, node)
            # the node sees its client at the gateway's address (SNAT), as behind a provider's
            assert said.returncode == 0, said.stderr
            assert said.stdout.split()[:2] == [node, gateway["address"]], said.stdout
        assert tb.ssh("node1", "true").returncode == 0   # the nodes' own addresses still answer

        tb.fault("kill-node", "node1")
        assert through_gateway(tb, gateway, "node1").returncode != 0
        tb.fault("revive-node", "node1")
        said = through_gateway(tb, gateway, "node1")
        assert said.returncode == 0 and said.stdout.split()[0] == "node1", said.stderr
    assert read_state(tb.dir)["gateway"] is None
    assert not Path(f"/run/netns/k3tb{tb.idx}-gateway").exists()
    assert leftovers(tb.dir, tb.idx) == []

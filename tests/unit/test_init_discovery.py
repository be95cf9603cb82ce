"""init's readings of a host: `ip -j` and findmnt output from real transcripts in, typed
records out; then the choices made from them (cluster network and NIC, the data disk)."""

from __future__ import annotations

from pathlib import Path

import pytest

from k3deploy.core.errors import BadInputError
from k3deploy.node import host_facts, private_net
from k3deploy.node.data_disk import data_disk
from k3deploy.node.host_facts import Address, Mount, Route

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"


def real(tool: str, version: str, name: str) -> str:
    return (REAL / tool / version / f"{name}.txt").read_text()


def test_ip_addr_two_nics_from_a_real_transcript():
    addrs = host_facts.parse_addresses(real("iproute2", "6.1.0", "addr-show-two-nics"), 0)
    assert addrs == [Address("lo", "127.0.0.1", 8, "host"),
                     Address("eth0", "10.213.0.12", 24, "global"),
                     Address("eth1", "192.168.77.12", 24, "global")]
    assert [str(a) for a in private_net.candidates(addrs)] == ["eth0 10.213.0.12/24",
                                                               "eth1 192.168.77.12/24"]
    assert host_facts.parse_addresses("", 1) is None
    assert host_facts.parse_addresses("not json", 0) is None


def test_ip_route_get_from_real_transcripts():
    assert host_facts.parse_route(real("iproute2", "6.1.0", "route-get-peer"), 0) == \
        Route("eth0", "10.213.0.12")
    # the host's own address goes through lo: a peer never has it
    assert host_facts.parse_route(real("iproute2", "6.1.0", "route-get-local"), 0).dev == "lo"
    # "RTNETLINK answers: Network is unreachable", exit 2
    assert host_facts.parse_route("RTNETLINK answers: Network is unreachable\n", 2) is None


def test_route_to_refuses_anything_but_an_ipv4_address():
    assert host_facts.route_to("node1", "10.0.0.2").script == "ip -j route get 10.0.0.2"
    with pytest.raises(ValueError):
        host_facts.route_to("node1", "10.0.0.2; reboot")


def test_findmnt_from_a_real_testbed_node_picks_its_nvme_mount_not_a_bind_mount():
    mounts = host_facts.parse_mounts(real("util-linux", "2.38.1", "findmnt-testbed-node"), 0)
    assert Mount("/", "/dev/vda", "ext4", 270553174016, 83126075392) in mounts
    disk = data_disk(mounts)
    # the testbed's "NVMe" is a tmpfs: found as the largest data filesystem, flagged as not NVMe
    assert disk.mount.target == "/mnt/nvme" and disk.mount.fstype == "tmpfs"
    assert disk.nvme is False and disk.mount.size == 25769803776


def test_data_disk_prefers_an_nvme_device_and_never_the_root():
    mounts = [Mount("/", "/dev/nvme0n1p1", "ext4", 10**12, 10**11),        # EBS root on Nitro
              Mount("/data", "/dev/sdb1", "xfs", 8 * 10**12, 8 * 10**12),
              Mount("/opt/dlami/nvme", "/dev/md0", "ext4", 3 * 10**12, 3 * 10**12),
              Mount("/mnt/nvme", "/dev/nvme1n1", "xfs", 7 * 10**12, 7 * 10**12),
              Mount("/var/lib/docker", "/dev/nvme2n1", "xfs", 9 * 10**12, 1),
              Mount("/mnt/sub", "/dev/nvme3n1[/x]", "xfs", 9 * 10**12, 1)]
    disk = data_disk(mounts)
    assert disk.mount.target == "/mnt/nvme" and disk.nvme
    assert data_disk(mounts[:2]).mount.target == "/data" and not data_disk(mounts[:2]).nvme
    assert data_disk(mounts[:1]) is None


def four(extra: dict | None = None) -> dict[str, list[Address]]:
    hosts = {f"node{i}": [Address("lo", "127.0.0.1", 8, "host"),
                          Address("eth0", f"10.213.0.{10 + i}", 24)] for i in range(4)}
    for host, addrs in (extra or {}).items():
        hosts[host] = hosts[host] + addrs
    return hosts


SSH = {f"node{i}": f"10.213.0.{10 + i}" for i in range(4)}


def test_the_second_nic_nobody_shares_is_passed_over_and_the_note_says_why():
    two = host_facts.parse_addresses(real("iproute2", "6.1.0", "addr-show-two-nics"), 0)
    hosts = {**four(), "node2": two}
    chosen, notes = private_net.choose(hosts, SSH)
    assert {h: (c.address, c.nic) for h, c in chosen.items()} == {
        f"node{i}": (f"10.213.0.{10 + i}", "eth0") for i in range(4)}
    assert notes[0] == ("cluster network 10.213.0.0/24: the only private subnet every host has "
                        "an address in (192.168.77.0/24 is not shared)")
    assert notes[1] == ("node2: eth0 10.213.0.12/24, not eth1 192.168.77.12/24: not every node "
                        "has an address in 192.168.77.0/24")


def test_a_bridge_every_host_has_alike_is_no_cluster_network():
    docker0 = {h: [Address("docker0", "172.17.0.1", 16)] for h in SSH}
    assert private_net.shared_networks(private_net.candidates_of(four(docker0))) == \
        [Address("eth0", "10.213.0.10", 24).network]
    chosen, _ = private_net.choose(four(docker0), SSH)
    assert {c.nic for c in chosen.values()} == {"eth0"}


def test_two_shared_subnets_the_ssh_addresses_decide_else_ask_or_refuse():
    fast = {f"node{i}": [Address("ib0", f"192.168.50.{i + 1}", 24)] for i in range(4)}
    chosen, notes = private_net.choose(four(fast), SSH)
    assert {c.nic for c in chosen.values()} == {"eth0"} and "the SSH addresses are in it" in notes[0]
    by_name = {h: f"{h}.example.com" for h in SSH}
    with pytest.raises(BadInputError) as err:
        private_net.choose(four(fast), by_name)
    assert "10.213.0.0/24, 192.168.50.0/24" in str(err.value)
    assert "node3: eth0 10.213.0.13/24, ib0 192.168.50.4/24" in str(err.value)
    assert err.value.exit_code == 2
    chosen, notes = private_net.choose(four(fast), by_name, ask=lambda options: 1)
    assert {c.nic for c in chosen.values()} == {"ib0"} and "chosen at the prompt" in notes[0]


def test_no_common_private_subnet_is_bad_input_naming_what_was_found():
    hosts = {"a": [Address("eth0", "10.0.1.5", 24)], "b": [Address("eth0", "10.0.2.5", 24)],
             "c": [Address("eth0", "203.0.113.7", 24)]}
    with pytest.raises(BadInputError) as err:
        private_net.choose(hosts, {h: h for h in hosts})
    assert "a: eth0 10.0.1.5/24; b: eth0 10.0.2.5/24; c: none" in str(err.value)


def test_routes_through_another_nic_are_named():
    chosen = {h: private_net.Choice(a, "eth0", "10.213.0.0/24") for h, a in SSH.items()}
    routes = {"node0": {"node1": Route("eth0", "10.213.0.10"), "node2": Route("eth1", None),
                        "node3": None},
              "node1": {"node0": Route("eth0", "10.213.0.99")}}
    assert private_net.route_problems(chosen, routes) == [
        "node0 reaches node2's 10.213.0.12 through eth1, not eth0: check the routing table",
        "node0 has no route to node3's 10.213.0.13",
        "node1 reaches node0's 10.213.0.10 from 10.213.0.99, not 10.213.0.11: check the routing "
        "table"]

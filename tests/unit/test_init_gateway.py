"""`k3deploy init` for hosts behind one SSH gateway: GATEWAY:PORT arguments (or `[GATEWAY]:PORT`
as known_hosts names them), told apart by endpoint, and an inventory with a port per node."""

from __future__ import annotations

import pytest

from k3deploy.cli import init_findings, init_hosts, init_inventory
from k3deploy.cli.init_inventory import Access
from k3deploy.cluster import inventory as inventory_mod
from k3deploy.core.errors import BadInputError
from k3deploy.node.private_net import Choice
from tests.unit.test_init_inventory import found


@pytest.mark.parametrize("given, host, port", [
    ("gw.example.net:40100", "gw.example.net", 40100), ("[gw.example.net]:40101", "gw.example.net", 40101),
    ("203.0.113.7", "203.0.113.7", None), ("2001:db8::1", "2001:db8::1", None),
    ("[2001:db8::1]:2222", "2001:db8::1", 2222), ("node-3", "node-3", None)])
def test_a_host_argument_is_an_address_and_maybe_a_port(given, host, port):
    assert init_hosts.parse(given) == init_hosts.Target(given, host, port)


@pytest.mark.parametrize("given, said", [("gw:0", "port 0 is outside 1..65535"),
                                         ("gw:70000", "port 70000 is outside"),
                                         ("-oProxyCommand=x", "not a host name or address"),
                                         ("[gw; rm]:22", "not a host name or address")])
def test_what_is_no_host_is_refused(given, said):
    with pytest.raises(BadInputError) as err:
        init_hosts.parse(given)
    assert said in str(err.value)


def test_one_gateway_with_a_port_each_is_distinct_hosts():
    found_ = init_hosts.targets(["gw:40100", "[gw]:40101", "gw"], default_port=None)
    assert [(t.host, t.port) for t in found_.values()] == [("gw", 40100), ("gw", 40101), ("gw", None)]


@pytest.mark.parametrize("hosts, default", [(["gw:40100", "[GW]:40100"], None),
                                            (["gw", "gw:22"], None),
                                            (["gw", "gw:2222"], 2222)])
def test_one_endpoint_given_twice_is_refused_naming_both(hosts, default):
    with pytest.raises(BadInputError) as err:
        init_hosts.targets(hosts, default)
    assert str(err.value).endswith(f"hosts given twice (one SSH endpoint): {', '.join(sorted(hosts))}")
    assert "GATEWAY:PORT" in err.value.hint


def test_the_inventory_names_each_node_by_the_gateway_and_its_port(tmp_path):
    hosts = [init_findings.host_from("gw.example.net", f"node{i}", found(i), 40100 + i)
             for i in range(4)]
    chosen = {h.name: Choice(f"192.168.1.{10 + i}", "ens5", "192.168.1.0/24")
              for i, h in enumerate(hosts)}
    config = init_inventory.pick_config("h100", 4, 8)
    doc = init_inventory.inventory(config, hosts, chosen, Access(None, None, None, None),
                                   tmp_path, None)
    text = init_inventory.render(doc, init_inventory.header(config, hosts, [], [], ["gw:40100"]))
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    inv = inventory_mod.load(str(path))   # accepted: four endpoints, four private addresses
    assert [(n.address, n.port, n.private_address) for n in inv.nodes] == [
        ("gw.example.net", 40100 + i, f"192.168.1.{10 + i}") for i in range(4)]
    assert "# rank 1 node1 (gw.example.net port 40101): 8x NVIDIA H100" in text


def test_a_port_equal_to_the_inventory_port_is_left_to_it(tmp_path):
    hosts = [init_findings.host_from("gw", "node0", found(0), 2222),
             init_findings.host_from("gw", "node1", found(1), 40101)]
    chosen = {h.name: Choice(f"192.168.1.{10 + i}", "ens5", "192.168.1.0/24")
              for i, h in enumerate(hosts)}
    doc = init_inventory.inventory(init_inventory.pick_config("b200", 2, 8), hosts, chosen,
                                   Access(2222, None, None, None), tmp_path, None)
    assert doc["ssh"]["port"] == 2222
    assert [n.get("port") for n in doc["nodes"]] == [None, 40101]

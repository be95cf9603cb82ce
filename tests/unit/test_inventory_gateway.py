"""Inventories as providers hand them out: nodes behind one SSH gateway (one address, a port
per machine, `ssh -p 40123 root@gw`) are told apart by their SSH endpoint (address and port);
their private addresses stay unique."""

import pytest

from k3deploy.cluster import inventory
from k3deploy.core.errors import InventoryError
from k3deploy.node import http_probe
from k3deploy.node.session import endpoint_for
from tests.unit.invdata import four_nodes


def behind_gateway(ports=(40100, 40101, 40102, 40103), **ssh):
    doc = four_nodes(ssh={"port": 22, **ssh})
    for node, port in zip(doc["nodes"], ports):
        node["private_address"], node["address"] = node["address"], "gw.example.net"
        if port is not None:
            node["port"] = port
    return doc


def problems(doc) -> list[str]:
    with pytest.raises(InventoryError) as err:
        inventory.parse(doc, source="inv.yaml")
    assert err.value.exit_code == 2
    return err.value.problems


def test_one_address_with_a_port_per_node_is_four_nodes():
    inv = inventory.parse(behind_gateway())
    ends = [(e.host, e.port) for e in (endpoint_for(inv, n) for n in inv.nodes)]
    assert ends == [("gw.example.net", 40100 + i) for i in range(4)]
    # what the nodes use between them is each one's own private address, never the gateway
    assert [n.self_ip for n in inv.nodes] == [f"10.0.0.{10 + i}" for i in range(4)]


def test_the_inventory_port_is_one_of_the_endpoints():
    # node0 takes ssh.port (22), the others their own: still four endpoints
    inv = inventory.parse(behind_gateway(ports=(None, 40101, 40102, 40103)))
    assert [endpoint_for(inv, n).port for n in inv.nodes] == [22, 40101, 40102, 40103]


def test_same_address_and_port_is_refused_naming_both_nodes():
    found = problems(behind_gateway(ports=(40100, 40101, 40100, 40103)))
    assert found == ["nodes[2].address: 'gw.example.net' is already used by nodes[0] (node0) "
                     "with SSH port 40100; every node needs its own SSH endpoint (its own "
                     "address, or its own nodes[].port behind one gateway)"]


def test_a_node_port_equal_to_the_inventory_port_is_the_same_endpoint():
    found = problems(behind_gateway(ports=(None, 22, 40102, 40103)))
    assert len(found) == 1 and found[0].startswith(
        "nodes[1].address: 'gw.example.net' is already used by nodes[0] (node0) with SSH port 22")


def test_host_names_compare_without_case():
    doc = behind_gateway(ports=(40100, 40100, 40102, 40103))
    doc["nodes"][1]["address"] = "GW.example.net"
    assert any(p.startswith("nodes[1].address: 'GW.example.net' is already used by nodes[0] "
                            "(node0)") for p in problems(doc))


def test_duplicate_private_addresses_behind_a_gateway_are_refused():
    doc = behind_gateway()
    doc["nodes"][3]["private_address"] = "10.0.0.11"
    assert problems(doc) == ["nodes[3].private_address: '10.0.0.11' is already the private "
                             "address of nodes[1] (node1); SGLANG_HOST_IP must be unique per node"]


def test_gateway_without_private_addresses_says_what_to_set():
    doc = behind_gateway()
    for node in doc["nodes"]:
        del node["private_address"]
    found = problems(doc)
    # the gateway is no node's private address: three repeats, each naming the first holder,
    # plus address_rules' "not an IP address" for each node
    repeats = [p for p in found if "already the private address" in p]
    assert [p.split(":")[0] for p in repeats] == ["nodes[1].address", "nodes[2].address",
                                                  "nodes[3].address"]
    assert all("of nodes[0] (node0)" in p and "need each its own nodes[].private_address" in p
               for p in repeats), repeats


def test_the_endpoint_behind_a_gateway_is_the_head_private_address():
    # the gateway forwards SSH ports only: its own :8000 is no node's serve port
    inv = inventory.parse(behind_gateway(user="ubuntu"))
    assert http_probe.url(inv) == "http://10.0.0.10:8000/v1"
    assert http_probe.tunnel_hint(inv) == (
        "the head is behind the SSH gateway gw.example.net; from outside its private network: "
        "ssh -p 40100 -N -L 8000:127.0.0.1:8000 ubuntu@gw.example.net, then "
        "http://127.0.0.1:8000/v1")


def test_an_inventory_of_own_addresses_keeps_its_endpoint():
    inv = inventory.parse(four_nodes())
    assert http_probe.url(inv) == "http://10.0.0.10:8000/v1"
    assert http_probe.tunnel_hint(inv) is None
    doc = four_nodes()
    doc["nodes"][0]["address"], doc["nodes"][0]["private_address"] = "203.0.113.7", "10.0.0.10"
    assert http_probe.url(inventory.parse(doc)) == "http://203.0.113.7:8000/v1"

"""Peer fan-out, laptop side: inventory defaults and the split of large files among nodes."""

import pytest

from k3deploy.cluster import fanout, inventory
from k3deploy.core.errors import InventoryError
from k3deploy.cluster.hubmeta import RepoFile
from tests.unit.invdata import four_nodes


def lfs(path, size):
    return RepoFile(path, size, f"{abs(hash(path)):064x}"[-64:], "c" * 40)


def small(path, size):
    return RepoFile(path, size, None, "d" * 40)


FILES = [lfs("a", 100), lfs("b", 90), lfs("c", 60), lfs("d", 50), lfs("e", 40), lfs("f", 10),
         small("config.json", 5), small("index.json", 7)]


def test_peers_default_on_for_several_nodes_off_for_one():
    assert fanout.peers_enabled(inventory.parse(four_nodes()))
    one = four_nodes(nodes=[{"name": "solo", "address": "10.0.0.9"}])
    assert not fanout.peers_enabled(inventory.parse(one))
    assert not fanout.peers_enabled(inventory.parse({**one, "download": {"peers": True}}))
    off = inventory.parse(four_nodes(download={"peers": False}))
    assert not fanout.peers_enabled(off)
    assert inventory.parse(four_nodes()).ports.peer == 8951


def test_inventory_refuses_unknown_download_keys_and_a_peer_port_clash():
    with pytest.raises(InventoryError) as err:
        inventory.parse(four_nodes(download={"peer": True}))
    assert err.value.problems[0].startswith("download.peer: unknown field")
    with pytest.raises(InventoryError) as err:
        inventory.parse(four_nodes(ports={"peer": 8000}))
    assert err.value.problems == [
        "ports: 8000 is used for more than one purpose (ports.serve, ports.peer)"]
    # without peers the port is not used, so it may equal another
    inventory.parse(four_nodes(ports={"peer": 8000}, download={"peers": False}))


def test_assignment_balances_bytes_largest_first():
    owner = fanout.assign(FILES, ["n0", "n1", "n2"])
    assert owner == {"a": "n0", "b": "n1", "c": "n2", "d": "n2", "e": "n1", "f": "n0"}
    loads = {n: sum(f.size for f in FILES if owner.get(f.path) == n) for n in ("n0", "n1", "n2")}
    assert loads == {"n0": 110, "n1": 130, "n2": 110}
    assert "config.json" not in owner and "index.json" not in owner


def test_assignment_is_deterministic_whatever_the_file_order():
    again = fanout.assign(list(reversed(FILES)), ["n0", "n1", "n2"])
    assert again == fanout.assign(FILES, ["n0", "n1", "n2"])
    ties = [lfs(f"s{i}", 10) for i in range(8)]
    owner = fanout.assign(ties, ["n0", "n1", "n2", "n3"])
    assert [owner[f"s{i}"] for i in range(8)] == ["n0", "n1", "n2", "n3"] * 2


def test_peer_block_names_the_others_by_private_address():
    inv = inventory.parse(four_nodes(nodes=[
        {"name": f"node{i}", "address": f"1.2.3.{i}", "private_address": f"10.0.0.{i}"}
        for i in range(3)]))
    manifest = type("M", (), {"files": FILES})()
    block = fanout.peer_block(inv, manifest, "node1", "/w/peer.secret")
    assert block["self"] == "node1" and block["port"] == 8951
    assert block["nodes"] == {"node0": "10.0.0.0", "node2": "10.0.0.2"}
    assert block["secret_file"] == "/w/peer.secret"
    assert set(block["owner"].values()) == {"node0", "node1", "node2"}


def test_peer_secret_is_made_once_0600_and_redacted(tmp_path):
    from k3deploy.core.redact import redact
    from k3deploy.node.secretfile import peer_secret
    first = peer_secret(tmp_path)
    path = tmp_path / "secrets" / "peer-secret"
    assert oct(path.stat().st_mode & 0o777) == "0o600" and len(first) >= 32
    assert peer_secret(tmp_path) == first
    assert redact(f"GET /index Authorization: {first}") == "GET /index Authorization: ***"

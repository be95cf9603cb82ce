"""known_hosts for nodes behind one SSH gateway: each `[host]:port` entry read and written as
OpenSSH does (tests/fixtures/real/openssh/9.2p1/known_hosts-gateway.txt and its .source: what
`ssh-keygen -F` found in that file is what the transport's reading must find)."""

import base64
import threading
from pathlib import Path

import paramiko
import pytest

from k3deploy.core.errors import HostKeyError
from k3deploy.node.ssh_types import Endpoint, known_hosts_name
from k3deploy.node.transport import NodeConnection, _AcceptNewPolicy

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "openssh" / "9.2p1"
GATEWAY_FILE = REAL / "known_hosts-gateway.txt"
KEY_A = "AAAAC3NzaC1lZDI1NTE5AAAAIFKKUcdXEcHf+FV+YoaBDfpGn1J4ZEMordu/opNWBMya"
KEY_B = "AAAAC3NzaC1lZDI1NTE5AAAAINOZD/gvDxJbr2+pNK33GJLWHftMGYoBijdLT+isskok"


def ed25519(b64: str) -> paramiko.PKey:
    return paramiko.PKey.from_type_string("ssh-ed25519", base64.b64decode(b64))


def endpoint(port: int | None, known_hosts: str = "/nonexistent") -> Endpoint:
    return Endpoint(name="node1", host="gw.example.net", user="root", port=port, key=None,
                    known_hosts=known_hosts, connect_timeout=1, command_timeout=5)


def host_keys_of(known_hosts: Path) -> paramiko.HostKeys:
    """What the transport loads before it connects (the client of its Fabric connection)."""
    conn = NodeConnection(endpoint(40100, str(known_hosts)))
    return conn._new_connection().client.get_host_keys()


@pytest.mark.parametrize("host, port, name", [
    ("gw.example.net", None, "gw.example.net"), ("gw.example.net", 22, "gw.example.net"),
    ("gw.example.net", 40100, "[gw.example.net]:40100"), ("10.0.0.5", 2222, "[10.0.0.5]:2222"),
    ("2001:db8::1", 2222, "[2001:db8::1]:2222")])
def test_the_name_is_openssh_put_host_port(host, port, name):
    assert known_hosts_name(host, port) == name


@pytest.mark.parametrize("name, key", [
    ("[gw.example.net]:40100", KEY_A), ("[gw.example.net]:40101", KEY_B),
    ("gw.example.net", KEY_B), ("[gw.example.net]:40102", KEY_A),
    ("[gw.example.net]:40103", None), ("[gw.example.net]:22", None)])
def test_reading_finds_what_ssh_keygen_found(name, key):
    found = host_keys_of(GATEWAY_FILE).lookup(name)
    assert (found["ssh-ed25519"].get_base64() if found else None) == key


def test_accept_new_writes_a_line_per_port_that_reads_back(tmp_path):
    known = tmp_path / "known_hosts"
    client = paramiko.SSHClient()
    policy = _AcceptNewPolicy(str(known), threading.Lock())
    for port, b64 in ((40100, KEY_A), (40101, KEY_B)):
        policy.missing_host_key(client, known_hosts_name("gw.example.net", port), ed25519(b64))
    assert known.read_text().splitlines() == [
        f"[gw.example.net]:40100 ssh-ed25519 {KEY_A}", f"[gw.example.net]:40101 ssh-ed25519 {KEY_B}"]
    keys = host_keys_of(known)
    assert keys.check("[gw.example.net]:40100", ed25519(KEY_A))
    assert not keys.check("[gw.example.net]:40101", ed25519(KEY_A))   # one node's key, not the other's
    assert keys.lookup("gw.example.net") is None   # the gateway itself (port 22) stays unknown


class _Refusing:
    def __init__(self, err: Exception):
        self.err = err

    def open(self):
        raise self.err


def test_a_changed_key_names_the_bracketed_entry_quoted_for_a_shell():
    conn = NodeConnection(endpoint(40101, "/home/me/my hosts"))
    bad = paramiko.BadHostKeyException("[gw.example.net]:40101", ed25519(KEY_A), ed25519(KEY_B))
    with pytest.raises(HostKeyError) as err:
        conn._handshake(_Refusing(bad))
    assert "host key of [gw.example.net]:40101 CHANGED" in str(err.value)
    assert "ssh-keygen -f '/home/me/my hosts' -R '[gw.example.net]:40101'" in err.value.hint


def test_an_unknown_key_says_how_to_scan_that_port():
    conn = NodeConnection(endpoint(40101))
    missing = paramiko.SSHException("Server '[gw.example.net]:40101' not found in known_hosts")
    with pytest.raises(HostKeyError) as err:
        conn._handshake(_Refusing(missing))
    assert "host key of [gw.example.net]:40101 is unknown" in str(err.value)
    assert "ssh-keyscan -p 40101 gw.example.net" in err.value.hint

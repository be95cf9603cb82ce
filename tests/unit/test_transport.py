"""Retry bounds of the transport, without a network: the connection opener is replaced."""


import pytest

from types import SimpleNamespace
from k3deploy.core import interrupt
from k3deploy.core.errors import UnreachableError
from k3deploy.node.ssh_types import Endpoint
from k3deploy.node.transport import NodeConnection


def endpoint():
    return Endpoint(name="node0", host="192.0.2.1", user="root", port=22, key=None,
                    known_hosts="/nonexistent", connect_timeout=1, command_timeout=5)


def test_connect_gives_up_after_bounded_attempts(monkeypatch):
    conn = NodeConnection(endpoint(), connect_attempts=3)
    calls = []

    def refuse():
        calls.append(1)
        raise TimeoutError("timed out")

    monkeypatch.setattr(conn, "_open_once", refuse)
    slept = []   # the transport waits through interrupt.sleep (a stop request ends it)
    monkeypatch.setattr(interrupt, "sleep", slept.append)
    with pytest.raises(UnreachableError) as err:
        conn.open()
    assert len(calls) == 3 and len(slept) == 2 and all(0 < s <= 5 for s in slept), slept
    assert "after 3 attempts" in str(err.value) and err.value.node == "node0"
    assert "spot reclaim" in err.value.hint


def test_command_retried_only_when_marked_safe(monkeypatch):
    conn = NodeConnection(endpoint())
    calls = []

    def drop(command, stdin, timeout):
        calls.append(command)
        raise EOFError()

    monkeypatch.setattr(conn, "_run_once", drop)
    slept = []
    monkeypatch.setattr(interrupt, "sleep", slept.append)
    with pytest.raises(UnreachableError):
        conn.run(["docker", "run", "x"])
    assert len(calls) == 1 and slept == []
    calls.clear()
    with pytest.raises(UnreachableError) as err:
        conn.run(["cat", "/etc/hostname"], retry=True, step="probe")
    assert len(calls) == 3 and err.value.step == "probe"
    assert len(slept) == 2 and all(0 < s <= 5 for s in slept), slept   # wait_exponential(max=5)


def test_a_sudo_command_after_a_dropped_connection_opens_it_again_first(monkeypatch):
    """close() forgets a dropped connection; the next sudo command must ask the reopened
    connection's user (it raised AttributeError on None before)."""
    conn = NodeConnection(endpoint())
    opened = []

    def reopen():
        opened.append(1)
        conn._conn = SimpleNamespace(user="ubuntu", is_connected=True)

    monkeypatch.setattr(conn, "open", reopen)
    ran = []
    monkeypatch.setattr(conn, "_run_once", lambda command, stdin, timeout: ran.append(command) or
                        SimpleNamespace(ok=True))
    conn.close()
    conn.run(["systemctl", "restart", "docker"], sudo=True)
    assert opened and ran == ["sudo -n -- sh -c 'systemctl restart docker'"]

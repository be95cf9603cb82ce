"""The guards' long-poll protocol (k3deploy/remote/guard_http.py) on loopback, no root: a held
poll answers at the change, not at its heartbeat; one standing connection carries every poll;
unsigned or wrongly signed polls are refused; a vanished peer is an OSError, not a hang."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from k3deploy.remote import guard_http as net  # standard library only: imports as a package module

SECRET = "guard-secret-for-tests-0123456789"
# Holds far beyond the bounds below: a poll that waits for its heartbeat instead of answering
# at once fails by ~25 s, and no bound is under 5 s (a loaded machine misses those).
LONG_HOLD = 30.0
BOUND = 5.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Counted(net.Versioned):
    def __init__(self):
        self.data = {"node": "peer", "incident": None}
        super().__init__(lambda: dict(self.data))


@pytest.fixture
def peer():
    state, port = Counted(), free_port()
    server = net.serve("127.0.0.1", port, SECRET, state, max_hold=LONG_HOLD)
    state.port = port
    yield state
    server.shutdown()
    server.server_close()


def test_a_held_poll_answers_at_the_change_not_at_the_heartbeat(peer):
    link = net.PeerLink("127.0.0.1", peer.port, SECRET, hold=LONG_HOLD)
    first = link.ask()  # seen=-1: at once
    assert first["incident"] is None and first["version"] == 0

    def fire():
        time.sleep(0.3)
        peer.data["incident"] = {"cause": "rank 2 exited"}
        peer.changed()
    threading.Thread(target=fire).start()
    started = time.monotonic()
    second = link.ask()
    took = time.monotonic() - started
    assert second["incident"] == {"cause": "rank 2 exited"} and second["version"] == 1
    assert took < BOUND, took  # the change (0.3 s), long before the 30 s heartbeat
    link.close()


def test_an_unchanged_state_is_a_heartbeat_after_the_hold_on_one_connection(peer):
    link = net.PeerLink("127.0.0.1", peer.port, SECRET, hold=0.5)
    link.ask()
    conn = link.conn
    started = time.monotonic()
    beats = [link.ask() for _ in range(3)]
    took = time.monotonic() - started
    assert [b["version"] for b in beats] == [0, 0, 0]
    assert took >= 1.4, took  # each one held for its 0.5 s
    assert link.conn is conn and conn.sock is not None  # kept alive: no new connection per poll
    link.close()


def test_a_restarted_peer_answers_at_once_whatever_version_was_seen(peer):
    link = net.PeerLink("127.0.0.1", peer.port, SECRET, hold=LONG_HOLD)
    link.seen = 7  # the version of the guard that ran here before
    started = time.monotonic()
    assert link.ask()["version"] == 0
    assert time.monotonic() - started < BOUND
    link.close()


@pytest.mark.parametrize("secret", ["", "another-secret-of-the-same-length-0123"])
def test_an_unsigned_or_foreign_poll_is_refused(peer, secret):
    link = net.PeerLink("127.0.0.1", peer.port, secret, hold=0.1)
    with pytest.raises(OSError, match="HTTP 403"):
        link.ask()
    assert link.conn is None


def test_a_vanished_peer_is_an_error_not_a_hang():
    link = net.PeerLink("127.0.0.1", free_port(), SECRET, hold=0.5)
    started = time.monotonic()
    with pytest.raises(OSError):
        link.ask()
    assert time.monotonic() - started < BOUND


def test_hold_is_a_heartbeat_within_the_peer_timeout():
    assert net.hold_seconds(20, 1.0) == 5.0
    assert net.hold_seconds(8, 1.0) == 2.0
    assert net.hold_seconds(3, 1.0) == 1.0  # never shorter than the poll interval
    assert net.hold_seconds(3600, 1.0) == net.MAX_HOLD


def test_a_guard_from_before_long_polls_is_still_read():
    """After an upgrade, a node whose guard was not replaced yet serves only GET /state
    (404 for anything else) and answers at once; it must not read as a silent peer."""
    import json
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Old(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            if self.path != "/state" or not net.signed_ok(SECRET, "GET", self.path,
                                                          self.headers.get(net.AUTH, "")):
                self.send_error(403 if self.path == "/state" else 404)
                return
            body = json.dumps({"node": "old", "incident": None}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Old)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        link = net.PeerLink("127.0.0.1", server.server_address[1], SECRET, hold=2.0)
        assert link.ask() == {"node": "old", "incident": None} and link.legacy
        assert link.ask()["node"] == "old"  # and every poll after it, the old way
    finally:
        server.shutdown()
        server.server_close()

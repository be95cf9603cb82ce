"""The guards' private-network protocol: signed long polls over kept-alive HTTP/1.1.

Each guard holds one connection to every peer and asks `GET /state?seen=V&hold=H`: the peer
answers at once when its state is no longer version V (an incident, its engine exited, or a
restarted guard), else after H seconds with the same state (a heartbeat). A failure crosses
the cluster as soon as it happens, while an idle cluster of N nodes answers about N*N/H small
requests per second over N*N standing connections, not N*N new connections every poll.
Standard library only; uploaded beside guard.py.
"""
from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

if TYPE_CHECKING:
    from typing import TypeAlias

    # protocol.JSON's: the guard ships without protocol.py (node/guard_config.py SCRIPTS)
    JSON: TypeAlias = dict[str, "JSON"] | list["JSON"] | str | int | float | bool | None
    Doc: TypeAlias = dict[str, JSON]

AUTH = "X-K3-Guard"
SKEW = 300  # seconds of clock difference between nodes an authenticated request tolerates
MAX_HOLD = 5.0


def sign(secret: str, method: str, path: str, ts: str) -> str:
    return hmac.new(secret.encode(), f"{ts}:{method}:{path}".encode(), hashlib.sha256).hexdigest()


def signed_ok(secret: str, method: str, path: str, header: str) -> bool:
    ts, _, mac = (header or "").partition(":")
    try:
        fresh = abs(time.time() - float(ts)) < SKEW
    except ValueError:
        return False
    return fresh and hmac.compare_digest(mac, sign(secret, method, path, ts))


def hold_seconds(peer_timeout: float, poll: float) -> float:
    """How long a peer may hold a poll: a heartbeat several times within the peer timeout,
    never shorter than the poll interval."""
    return max(poll, min(MAX_HOLD, peer_timeout / 4))


class Versioned:
    """A state whose changes wake every held poll."""

    def __init__(self, snapshot: Callable[[], Doc]):
        self.snapshot = snapshot  # taken under the caller's own lock
        self.version = 0
        self.cond = threading.Condition()

    def changed(self) -> None:
        with self.cond:
            self.version += 1
            self.cond.notify_all()

    def wait_past(self, seen: int, hold: float) -> Doc:
        with self.cond:
            if seen == self.version:
                self.cond.wait_for(lambda: seen != self.version, timeout=hold)
            version = self.version
        return {**self.snapshot(), "version": version}


def serve(bind: str, port: int, secret: str, state: Versioned, max_hold: float) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # kept alive: one standing connection per peer
        timeout = max_hold * 4 + 30  # a peer that vanished without a FIN frees its thread

        def log_message(self, format: str, *args: str | int) -> None:
            pass

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            if url.path != "/state" or not signed_ok(secret, "GET", self.path,
                                                     self.headers.get(AUTH, "")):
                self.send_error(403 if url.path == "/state" else 404)
                return
            query = parse_qs(url.query)
            try:
                seen = int(query.get("seen", ["-1"])[0])
                hold = min(max_hold, max(0.0, float(query.get("hold", ["0"])[0])))
            except ValueError:
                self.send_error(400)
                return
            body = json.dumps(state.wait_past(seen, hold)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        allow_reuse_address = True

    server = Server((bind, port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class PeerLink:
    """One peer's standing connection; `ask` returns its next state or raises OSError."""

    def __init__(self, address: str, port: int, secret: str, hold: float):
        self.address, self.port, self.secret, self.hold = address, port, secret, hold
        self.seen = -1
        self.conn: http.client.HTTPConnection | None = None
        # A guard from before long polls (k3deploy upgraded, that node's guard not yet
        # replaced) knows only GET /state and answers at once: the caller paces the polls.
        self.legacy = False

    def ask(self) -> Doc:
        try:
            return self._ask("/state" if self.legacy else
                             f"/state?seen={self.seen}&hold={self.hold:g}")
        except LookupError:
            self.legacy = True
            return self._ask("/state")

    def _ask(self, path: str) -> Doc:
        ts = f"{time.time():.3f}"
        if self.conn is None:
            # Straight to the peer: no http_proxy from root's environment can carry this.
            self.conn = http.client.HTTPConnection(self.address, self.port,
                                                   timeout=self.hold + 10)
        try:
            self.conn.request("GET", path, headers={AUTH: f"{ts}:{sign(self.secret, 'GET', path, ts)}"})
            resp = self.conn.getresponse()
            body = resp.read()
            if resp.status == 404 and not self.legacy:
                raise LookupError(path)
            if resp.status != 200:
                raise OSError(f"HTTP {resp.status} from the peer's guard")
            state: Doc = json.loads(body)
        except (OSError, ValueError, http.client.HTTPException) as err:
            self.close()
            raise OSError(str(err) or type(err).__name__) from None
        version = state.get("version", -1)   # Versioned.wait_past's int
        self.seen = version if isinstance(version, int) else -1
        return state

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

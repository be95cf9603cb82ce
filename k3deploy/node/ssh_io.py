"""Under the SSH transport (node/transport.py): the TCP socket it opens, how a dead peer is
noticed, and reading a command's channel to the end. Duck-typed on Paramiko's channel and
transport objects, so only transport.py imports Paramiko (.importlinter)."""

from __future__ import annotations

import select
import socket
import time
from typing import Protocol

from k3deploy.core import interrupt

KEEPALIVE_SECONDS = 15
# A node that vanishes without a FIN/RST (spot reclaim, partition) would otherwise hold a
# command until its timeout (minutes): unacknowledged keepalives drop the connection after this.
DEAD_PEER_SECONDS = 20


class Channel(Protocol):
    """What is read of a Paramiko channel (paramiko/channel.py)."""
    @property
    def closed(self) -> bool: ...
    @property
    def eof_received(self) -> int: ...
    def exit_status_ready(self) -> bool: ...
    def recv_ready(self) -> bool: ...
    def recv_stderr_ready(self) -> bool: ...
    def recv(self, _nbytes: int, /) -> bytes: ...
    def recv_stderr(self, _nbytes: int, /) -> bytes: ...
    def close(self) -> None: ...
    def fileno(self) -> int: ...


class Transport(Protocol):
    """What is set on a Paramiko transport (paramiko/transport.py): its socket is a channel of
    the jump host's transport through a ProxyJump."""
    @property
    def sock(self) -> socket.socket | Channel: ...
    def set_keepalive(self, interval: float) -> None: ...


def drain(chan: Channel, deadline: float) -> tuple[str, str]:
    """Read stdout and stderr until the remote side closes both, without deadlocking on
    either buffer filling up; TimeoutError (carrying stdout so far) past the deadline."""
    out, err = bytearray(), bytearray()
    while not (chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready()
               and chan.eof_received):
        if time.monotonic() > deadline:
            raise TimeoutError(out.decode(errors="replace"))
        if interrupt.requested():  # Ctrl-C: stop reading; the remote command is left to itself
            chan.close()
            interrupt.check()
        got = False
        while chan.recv_ready():
            out += chan.recv(65536)
            got = True
        while chan.recv_stderr_ready():
            err += chan.recv_stderr(65536)
            got = True
        if not got:
            if chan.closed and not chan.recv_ready() and not chan.recv_stderr_ready():
                break
            _wait_readable(chan)
    return out.decode(errors="replace"), err.decode(errors="replace")


def direct_socket(host: str, port: int, timeout: float) -> socket.socket:
    """The TCP connection paramiko would open, with TCP_NODELAY (as OpenSSH sets it): SSH's
    small messages (a channel open, an exec request, a login step) otherwise wait for the
    peer's delayed ACK, 40 ms on Linux, several times per login and per command."""
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def detect_dead_peer(transport: Transport, connect_timeout: float) -> None:
    """SSH keepalives plus TCP_USER_TIMEOUT (Linux): data unacknowledged for
    DEAD_PEER_SECONDS (or 3 connect timeouts) fails the socket, so a silent node is noticed."""
    interval = max(1, min(KEEPALIVE_SECONDS, int(connect_timeout)))
    transport.set_keepalive(interval)
    # Through a ProxyJump the "socket" is a channel of the jump host's transport: skip.
    if hasattr(socket, "TCP_USER_TIMEOUT") and isinstance(transport.sock, socket.socket):
        limit = max(DEAD_PEER_SECONDS, 3 * connect_timeout)
        transport.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(limit * 1000))


def _wait_readable(chan: Channel) -> None:
    # Paramiko channels are selectable; a short select avoids a busy loop.
    select.select([chan], [], [], 0.02)

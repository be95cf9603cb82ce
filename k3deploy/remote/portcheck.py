"""Node side of the TCP reachability check (stdlib only; shipped inline with python3 -c).

mesh SECONDS ME PORT... -- HOST:PORT...: every node at once, in one command each: listen on its
  own ports, probe the others' (a refused connection is retried until SECONDS: that node's
  listeners may not be up yet), and keep listening until every node it probes (they probe it
  back) has connected to every port, or SECONDS. ME is the address the others probe this node
  at; each probe names it (a node whose traffic leaves by another address still counts, a
  stray client never does). Prints {"ports": {port: "listening" | "busy"},
  "probes": {"host:port": true | "why not"}}.
NCCL and Gloo hang on a partially open TCP range instead of failing, so this runs before launch.

One thread, non-blocking sockets: on 32 nodes each node makes and takes ~100 connections, and a
thread per connection cost more CPU than everything else a no-op `up` runs on the node.
"""

import errno
import json
import os
import selectors
import socket
import sys
import time
from typing import TypedDict

HELLO = "k3mesh"
RETRY = 0.1         # a refused probe is tried again this much later
ATTEMPT = 5.0       # one connection attempt that gets no answer (a DROP rule) ends here
PARALLEL = 64       # probes in flight: all at once would flood the peers' accept queues
GREETING = 2.0      # an accepted connection that names nobody is closed after this


class Found(TypedDict):
    """What the program prints."""
    ports: dict[int, str]              # port -> listening | busy
    probes: dict[str, str | bool]      # host:port -> True | why not


class Mesh:
    def __init__(self, seconds: float, me: str, ports: list[int], targets: list[str]):
        self.deadline = time.monotonic() + seconds
        self.me, self.sel = me, selectors.DefaultSelector()
        self.status: dict[int, str] = {}
        self.seen: set[tuple[str, int]] = set()
        self.results: dict[str, str | bool] = {}
        self.waiting = [(0.0, t) for t in targets]   # (not before, target)
        self.inflight = 0
        peers = {t.rsplit(":", 1)[0] for t in targets}
        self.listen(ports)
        # Counted by (peer, port) as the peers name themselves: a stray client (an engine
        # retrying its rendezvous on this very port) must not end the listening early.
        self.wanted = {(p, port) for p in peers for port, how in self.status.items()
                       if how == "listening"}
        self.total = len(targets)

    def listen(self, ports: list[int]) -> None:
        """A port already in use is reported as busy: something listens there (a running
        engine's rendezvous), so probing it still tests reachability."""
        for port in ports:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                s.close()
                self.status[port] = "busy"
                continue
            s.listen(1024)  # every other node probes at once
            s.setblocking(False)
            self.status[port] = "listening"
            self.sel.register(s, selectors.EVENT_READ, (self.on_listener, port))

    def run(self) -> Found:
        while time.monotonic() < self.deadline:
            if len(self.results) == self.total and self.wanted <= self.seen:
                break
            self.start_probes()
            for key, _ in self.sel.select(timeout=self.next_wake()):
                key.data[0](key.fileobj, *key.data[1:])
            self.expire()
        for _, target in self.waiting:   # refused until the end
            self.results.setdefault(target, os.strerror(errno.ECONNREFUSED))
        for target in self.pending():      # no answer at all
            self.results.setdefault(target, "timed out")
        return {"ports": self.status, "probes": self.results}

    def next_wake(self) -> float:
        now = time.monotonic()
        ready = [at for at, _ in self.waiting] if self.inflight < PARALLEL else []
        return max(0.0, min(min(ready, default=self.deadline) - now, RETRY))

    def pending(self) -> list[str]:
        return [k.data[1] for k in self.sel.get_map().values() if k.data[0] == self.on_probe]

    # -- probing the others ------------------------------------------------------------
    def start_probes(self) -> None:
        now, later = time.monotonic(), []
        for at, target in self.waiting:
            if at <= now and self.inflight < PARALLEL:
                self.connect(target)
            else:
                later.append((at, target))
        self.waiting = later

    def connect(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        s.setblocking(False)
        code = s.connect_ex((host, int(port)))
        if code not in (0, errno.EINPROGRESS):
            s.close()
            self.refused_or_failed(target, code)
            return
        self.inflight += 1
        self.sel.register(s, selectors.EVENT_WRITE, (self.on_probe, target, time.monotonic() + ATTEMPT))

    def on_probe(self, sock: socket.socket, target: str, _until: float) -> None:
        code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        self.drop(sock, probe=True)
        if code == 0:
            try:
                sock.send(f"{HELLO} {self.me}\n".encode())
            except OSError:
                pass   # connected is reached; a listener that is not ours may hang up
            sock.close()
            self.results[target] = True
            return
        sock.close()
        self.refused_or_failed(target, code)

    def refused_or_failed(self, target: str, code: int) -> None:
        """Refused: no listener yet, or a REJECT rule; tried again until the deadline. Any
        other reason (unreachable, a timeout) tells a firewall from no listener: final."""
        if code == errno.ECONNREFUSED and time.monotonic() + RETRY <= self.deadline:
            self.waiting.append((time.monotonic() + RETRY, target))
        else:
            self.results[target] = os.strerror(code)

    # -- being probed ------------------------------------------------------------------
    def on_listener(self, sock: socket.socket, port: int) -> None:
        try:
            while True:
                conn, _ = sock.accept()
                conn.setblocking(False)
                self.sel.register(conn, selectors.EVENT_READ,
                                  (self.on_greeting, port, time.monotonic() + GREETING, bytearray()))
        except (BlockingIOError, InterruptedError):
            pass

    def on_greeting(self, conn: socket.socket, port: int, _until: float, got: bytearray) -> None:
        try:
            chunk = conn.recv(256)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        got += chunk
        if chunk and b"\n" not in got and len(got) < 256:
            return
        self.drop(conn)
        conn.close()
        words = got.decode(errors="replace").split()
        if len(words) == 2 and words[0] == HELLO:
            self.seen.add((words[1], port))

    # -- timeouts ----------------------------------------------------------------------
    def expire(self) -> None:
        now = time.monotonic()
        for key in list(self.sel.get_map().values()):
            handler, probe = key.data[0], key.data[0] == self.on_probe
            if handler != self.on_listener and key.data[2] <= now:
                sock = key.fileobj
                assert isinstance(sock, socket.socket)  # only sockets are registered
                self.drop(sock, probe=probe)
                sock.close()
                if probe:
                    self.results[key.data[1]] = "timed out"

    def drop(self, sock: socket.socket, probe: bool = False) -> None:
        self.sel.unregister(sock)
        if probe:
            self.inflight -= 1


def mesh(seconds: float, me: str, ports: list[int], targets: list[str]) -> None:
    print(json.dumps(Mesh(seconds, me, ports, targets).run()), flush=True)


if __name__ == "__main__":
    split = sys.argv.index("--")
    mesh(float(sys.argv[2]), sys.argv[3], [int(p) for p in sys.argv[4:split]],
         sys.argv[split + 1:])

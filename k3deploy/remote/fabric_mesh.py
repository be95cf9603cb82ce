"""One node's part of the pairwise throughput mesh (stdlib only; `python3 - PLAN`, the program
on stdin, its plan as JSON in argv: names, addresses and a port, nothing secret).

Every node of the mesh runs this at once. Each listens on the private address for the whole
run; in each round it is paired with at most one other node, and the two push to each other at
the same time for `seconds` (both directions of the link at once). A round starts by a
handshake, not by the clock: the sender connects to its partner's listener (retrying while the
partner's program has not started yet) and names itself and the round; the partner's receiver
answers `go` only once its own node has reached that round, so a node whose SSH session
started late is waited for, and a node still in an earlier round is never sent to. A partner
not ready `deadline` seconds into the round is given up (an error for that link, and the round
ends: a sender that comes later hears `late`, so no stream overlaps the next round); a round
ends at the latest `round_limit` seconds after it began. A link's figure is what its receiver
counted between the first and the last byte of the stream: the sender's socket buffers do not
inflate it.

Prints one JSON line: {"received": {sender: {"bytes", "seconds"}}, "sent": {receiver: bytes},
"errors": {peer: text}}.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from typing import TypedDict

BUFFER = 4 * 1024 * 1024
HEADER_MAX = 256
RETRY = 0.2      # between connection attempts while the partner's listener is not up yet
GO, LATE = b"go\n", b"late\n"


class Plan(TypedDict):
    """The program's argv (steps/fabric/fabric_mesh.py writes it)."""
    me: str
    listen: str
    port: int
    rounds: list[list[str] | None]   # per round: the partner's [name, address], or None (idle)
    seconds: float
    deadline: float
    round_limit: float


class Counted(TypedDict):
    bytes: int
    seconds: float


class Found(TypedDict):
    """What the program prints (facts/fabric_mesh.py MeshCount)."""
    received: dict[str, Counted]
    sent: dict[str, int]
    errors: dict[str, str]


class Node:
    """What the receivers share with the rounds: the round this node is in, what arrived."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.current: float = -1
        self.answered: set[int] = set()   # rounds whose partner was told go
        self.counted: dict[str, Counted] = {}
        self.done: dict[str, threading.Event] = {}

    def enter(self, k: float) -> None:
        with self.cond:
            self.current = k
            self.cond.notify_all()

    def reached(self, k: int, timeout: float) -> bool:
        """Waits until this node is in round k; False if it is past it or never got there."""
        with self.cond:
            self.cond.wait_for(lambda: self.current >= k, timeout)
            if self.current == k:
                self.answered.add(k)
            return self.current == k

    def give_up(self, k: int) -> bool:
        """Ends round k unless its partner was told go already (then its stream is coming)."""
        with self.cond:
            if k in self.answered:
                return False
            self.current = k + 0.5
            return True

    def finished(self, name: str) -> threading.Event:
        with self.cond:
            return self.done.setdefault(name, threading.Event())


def read_line(conn: socket.socket) -> bytes:
    line = b""
    while not line.endswith(b"\n") and len(line) < HEADER_MAX:
        got = conn.recv(1)
        if not got:
            break
        line += got
    return line


def count(conn: socket.socket) -> Counted:
    buf = bytearray(BUFFER)
    view = memoryview(buf)
    total, first, last = 0, None, 0.0
    try:
        while n := conn.recv_into(view):
            last = time.monotonic()
            first = first or last
            total += n
    except OSError:
        pass
    return {"bytes": total, "seconds": round((last - first) if first else 0.0, 6)}


def receive(conn: socket.socket, node: Node, plan: Plan) -> None:
    with conn:
        conn.settimeout(plan["round_limit"])
        try:
            name, _, k = read_line(conn).decode(errors="replace").strip().rpartition(" ")
            if not name or not k.isdigit():
                return
            if not node.reached(int(k), plan["round_limit"]):
                conn.sendall(LATE)
                return
            conn.sendall(GO)
            got = count(conn)
        except OSError:
            return
        with node.cond:
            node.counted[name] = got
        node.finished(name).set()


def listen(plan: Plan, node: Node, stop: threading.Event) -> threading.Thread:
    srv = socket.create_server((plan["listen"], plan["port"]), reuse_port=False, backlog=64)
    srv.settimeout(0.2)

    def loop() -> None:
        with srv:
            while not stop.is_set():
                try:
                    conn, _ = srv.accept()
                except TimeoutError:
                    continue
                except OSError:
                    break
                threading.Thread(target=receive, args=(conn, node, plan), daemon=True).start()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


def connect(addr: str, port: int, until: float) -> socket.socket:
    """The partner's listener, retried until `until` (its program may not have started yet)."""
    while True:
        try:
            return socket.create_connection((addr, port), timeout=max(0.1, until - time.monotonic()))
        except OSError:
            if time.monotonic() + RETRY >= until:
                raise
            time.sleep(RETRY)


class Handshake(Exception):
    """The partner was not reached in this round."""


def shake(plan: Plan, k: int, addr: str, until: float) -> socket.socket:
    """A connection to the partner that said go for round k, by `until`; else Handshake."""
    try:
        sock = connect(addr, plan["port"], until)
    except OSError as err:
        raise Handshake(f"round {k}: {type(err).__name__}: {err} (retried for "
                        f"{plan['deadline']:g} s)") from err
    answer: bytes | OSError
    try:
        sock.sendall(f"{plan['me']} {k}\n".encode())
        sock.settimeout(max(0.1, until - time.monotonic()))
        answer = read_line(sock)
    except OSError as err:
        answer = err
    if answer == GO:
        return sock
    sock.close()
    raise Handshake(why_not(plan, k, answer))


def why_not(plan: Plan, k: int, answer: bytes | OSError) -> str:
    if isinstance(answer, TimeoutError):
        return f"round {k}: the partner was not in this round within {plan['deadline']:g} s"
    if isinstance(answer, OSError):
        return f"round {k}: {type(answer).__name__}: {answer}"
    if answer:
        return (f"round {k}: the partner answered {answer.decode(errors='replace').strip()!r}: "
                "it is past this round")
    return f"round {k}: the partner closed without an answer"


def push(plan: Plan, k: int, addr: str, until: float) -> int:
    """Sends zeros to the partner for `seconds` once it says go; the bytes the kernel took."""
    payload = memoryview(bytes(BUFFER))
    with shake(plan, k, addr, until) as sock:
        sock.settimeout(plan["round_limit"])
        sent, stop = 0, time.monotonic() + plan["seconds"]
        while time.monotonic() < stop:
            sent += sock.send(payload)
    return sent


def one_round(plan: Plan, node: Node, k: int, partner: list[str] | None, sent: dict[str, int],
              errors: dict[str, str]) -> None:
    begun = time.monotonic()
    node.enter(k)
    if partner is None:
        return
    name, addr = partner
    try:
        sent[name] = push(plan, k, addr, begun + plan["deadline"])
    except Handshake as err:
        errors[name] = str(err)
        if node.give_up(k):   # the partner is not in this round: nothing of it will come
            return
    except OSError as err:
        errors[name] = f"{type(err).__name__}: {err}"
    node.finished(name).wait(max(0.0, begun + plan["round_limit"] - time.monotonic()))


def run(plan: Plan) -> Found:
    node, stop = Node(), threading.Event()
    listener = listen(plan, node, stop)
    sent: dict[str, int] = {}
    errors: dict[str, str] = {}
    for k, partner in enumerate(plan["rounds"]):
        one_round(plan, node, k, partner, sent, errors)
    node.enter(len(plan["rounds"]))   # a sender arriving after the last round hears "late"
    stop.set()
    listener.join(5)
    with node.cond:
        return {"received": dict(node.counted), "sent": sent, "errors": errors}


def main() -> int:
    plan: Plan = json.loads(sys.argv[1])
    try:
        found = run(plan)
    except OSError as err:   # the listener: the port taken, the address not on this node
        print(json.dumps({"error": f"cannot listen on {plan['listen']}:{plan['port']}: {err}"}))
        return 1
    print(json.dumps(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())

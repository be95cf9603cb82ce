"""One node's part of the pairwise throughput mesh (stdlib only; `python3 - PLAN`, the program
on stdin, its plan as JSON in argv: names, addresses and a port, nothing secret).

Every node of the mesh runs this at once. Each listens on the private address for the whole
run and counts what every sender pushes to it; in each round it is paired with at most one
other node, and the two push to each other at the same time for `seconds` (both directions of
the link at once). Rounds follow one another on each node's own clock, `gap` seconds apart, so
nodes whose start differs by less than `gap` never overlap two rounds. A link's figure is what
its receiver counted between the first and the last byte of the stream: the sender's socket
buffers do not inflate it.

Prints one JSON line: {"received": {sender: {"bytes", "seconds"}}, "sent": {receiver: bytes},
"errors": {peer: text}}.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time

BUFFER = 4 * 1024 * 1024
HEADER_MAX = 256
CONNECT_TIMEOUT = 5.0


def receive(conn: socket.socket, counted: dict, lock: threading.Lock) -> None:
    with conn:
        conn.settimeout(30)
        name = b""
        while not name.endswith(b"\n") and len(name) < HEADER_MAX:
            got = conn.recv(1)
            if not got:
                return
            name += got
        buf = bytearray(BUFFER)
        view = memoryview(buf)
        total, first, last = 0, None, None
        try:
            while True:
                n = conn.recv_into(view)
                if not n:
                    break
                last = time.monotonic()
                first = first or last
                total += n
        except OSError:
            pass
        with lock:
            counted[name.decode(errors="replace").strip()] = {
                "bytes": total, "seconds": round((last - first) if first else 0.0, 6)}


def listen(addr: str, port: int, counted: dict, lock: threading.Lock, stop: threading.Event):
    srv = socket.create_server((addr, port), reuse_port=False, backlog=64)
    srv.settimeout(0.2)
    workers = []

    def loop():
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            except OSError:
                break
            t = threading.Thread(target=receive, args=(conn, counted, lock), daemon=True)
            t.start()
            workers.append(t)
        srv.close()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread, workers


def push(me: str, addr: str, port: int, seconds: float) -> int:
    """Sends zeros to addr:port for `seconds`; the bytes the kernel took."""
    payload = memoryview(bytes(BUFFER))
    sent = 0
    with socket.create_connection((addr, port), timeout=CONNECT_TIMEOUT) as sock:
        sock.settimeout(seconds + 10)
        sock.sendall(f"{me}\n".encode())
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            sent += sock.send(payload)
    return sent


def run(plan: dict) -> dict:
    counted, lock, stop = {}, threading.Lock(), threading.Event()
    listener, workers = listen(plan["listen"], plan["port"], counted, lock, stop)
    start, slot = time.monotonic(), plan["gap"] + plan["seconds"]
    sent, errors = {}, {}
    for k, partner in enumerate(plan["rounds"]):
        time.sleep(max(0.0, start + k * slot + plan["gap"] - time.monotonic()))
        if partner is None:
            continue
        name, addr = partner
        try:
            sent[name] = push(plan["me"], addr, plan["port"], plan["seconds"])
        except OSError as err:
            errors[name] = f"{type(err).__name__}: {err}"
    time.sleep(max(0.0, start + len(plan["rounds"]) * slot + plan["gap"] - time.monotonic()))
    stop.set()
    listener.join(5)
    for t in list(workers):
        t.join(plan["seconds"] + 5)
    with lock:
        return {"received": dict(counted), "sent": sent, "errors": errors}


def main() -> int:
    plan = json.loads(sys.argv[1])
    try:
        found = run(plan)
    except OSError as err:   # the listener: the port taken, the address not on this node
        print(json.dumps({"error": f"cannot listen on {plan['listen']}:{plan['port']}: {err}"}))
        return 1
    print(json.dumps(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())

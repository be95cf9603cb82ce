"""Node side of the TCP reachability check (stdlib only; shipped inline with python3 -c).

mesh SECONDS ME PORT... -- HOST:PORT...: every node at once, in one command each: listen on its
  own ports, probe the others' (a refused connection is retried until SECONDS: that node's
  listeners may not be up yet), and keep listening until every node it probes (they probe it
  back) has connected to every port, or SECONDS. ME is the address the others probe this node
  at; each probe names it (a node whose traffic leaves by another address still counts, a
  stray client never does). Prints {"ports": {port: "listening" | "busy"},
  "probes": {"host:port": true | "why not"}}.
NCCL and Gloo hang on a partially open TCP range instead of failing, so this runs before launch.
"""

import json
import socket
import sys
import threading
import time

HELLO = "k3mesh"


def mesh(seconds, me, ports, targets):
    deadline = time.monotonic() + seconds
    seen, arrived = set(), threading.Condition()
    status = listen(ports, seen, arrived)
    results = probe(targets, deadline, me)
    # Counted by (peer, port) as the peers name themselves: a stray client (an engine
    # retrying its rendezvous on this very port) must not end the listening early.
    peers = {t.rsplit(":", 1)[0] for t in targets}
    wanted = {(p, port) for p in peers for port, how in status.items() if how == "listening"}
    with arrived:
        arrived.wait_for(lambda: wanted <= seen, timeout=max(0.0, deadline - time.monotonic()))
    print(json.dumps({"ports": status, "probes": results}), flush=True)


def listen(ports, seen, arrived):
    """A port already in use is reported as busy: something listens there (a running engine's
    rendezvous), so probing it still tests reachability."""
    status = {}
    for port in ports:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            status[port] = "busy"
            continue
        s.listen(1024)  # every other node probes at once
        status[port] = "listening"
        threading.Thread(target=_accept, args=(s, port, seen, arrived), daemon=True).start()
    return status


def _accept(sock, port, seen, arrived):
    while True:
        conn = sock.accept()[0]
        threading.Thread(target=_greeted, args=(conn, port, seen, arrived), daemon=True).start()


def _greeted(conn, port, seen, arrived):
    try:
        conn.settimeout(2.0)
        words = conn.recv(256).decode(errors="replace").split()
    except OSError:
        words = []
    finally:
        conn.close()
    if len(words) == 2 and words[0] == HELLO:
        with arrived:
            seen.add((words[1], port))
            arrived.notify_all()


def probe(targets, deadline, me, timeout=5.0, parallel=16):
    """Targets in parallel (bounded): with 32 nodes a sequential probe of a few blocked ports
    would outlast the deadline, and all at once would flood the accept queues."""
    results = {}
    gate = threading.Semaphore(parallel)

    def one(target):
        host, port = target.rsplit(":", 1)
        with gate:
            results[target] = _connect(host, int(port), timeout, deadline, me)

    threads = [threading.Thread(target=one, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def _connect(host, port, timeout, deadline, me):
    while True:
        try:
            with socket.create_connection((host, port), timeout=timeout) as conn:
                try:
                    conn.sendall(f"{HELLO} {me}\n".encode())
                except OSError:
                    pass   # connected is reached; a listener that is not ours may hang up
            return True
        except ConnectionRefusedError as err:   # no listener yet, or a REJECT rule
            if time.monotonic() + 0.1 > deadline:
                return err.strerror or "connection refused"
            time.sleep(0.1)
        except OSError as err:  # the reason tells a firewall (timeout) from no listener
            return getattr(err, "strerror", None) or str(err) or "timed out"


if __name__ == "__main__":
    split = sys.argv.index("--")
    mesh(float(sys.argv[2]), sys.argv[3], [int(p) for p in sys.argv[4:split]],
         sys.argv[split + 1:])

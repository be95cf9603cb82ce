"""Node side of the TCP reachability check (stdlib only; shipped inline with python3 -c).

mesh SECONDS PORT... -- HOST:PORT...: every node at once, in one command each: listen on its
  own ports, probe the others' (a refused connection is retried until SECONDS: that node's
  listeners may not be up yet), and keep listening until every node it probes (they probe it
  back) has connected to every port, or SECONDS. Prints {"ports": {port: "listening" | "busy"},
  "probes": {"host:port": true | "why not"}}.
NCCL and Gloo hang on a partially open TCP range instead of failing, so this runs before launch.
"""

import json
import socket
import sys
import threading
import time


def mesh(seconds, ports, targets):
    deadline = time.monotonic() + seconds
    seen, arrived = set(), threading.Condition()
    status = listen(ports, seen, arrived)
    results = probe(targets, deadline)
    # Counted by (peer, port): a stray client (an engine retrying its rendezvous on this very
    # port) must not end the listening before every peer got through.
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
        conn, (peer, _) = sock.accept()[:2]
        conn.close()
        with arrived:
            seen.add((peer, port))
            arrived.notify_all()


def probe(targets, deadline, timeout=5.0, parallel=16):
    """Targets in parallel (bounded): with 32 nodes a sequential probe of a few blocked ports
    would outlast the deadline, and all at once would flood the accept queues."""
    results = {}
    gate = threading.Semaphore(parallel)

    def one(target):
        host, port = target.rsplit(":", 1)
        with gate:
            results[target] = _connect(host, int(port), timeout, deadline)

    threads = [threading.Thread(target=one, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def _connect(host, port, timeout, deadline):
    while True:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            return True
        except ConnectionRefusedError as err:   # no listener yet, or a REJECT rule
            if time.monotonic() + 0.1 > deadline:
                return err.strerror or "connection refused"
            time.sleep(0.1)
        except OSError as err:  # the reason tells a firewall (timeout) from no listener
            return getattr(err, "strerror", None) or str(err) or "timed out"


if __name__ == "__main__":
    split = sys.argv.index("--")
    mesh(float(sys.argv[2]), [int(p) for p in sys.argv[3:split]], sys.argv[split + 1:])

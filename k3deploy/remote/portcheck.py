"""Node side of the TCP reachability check (stdlib only; shipped inline with python3 -c).

listen PORT...  : accept and close connections on each port for SECONDS, then exit
probe HOST:PORT...: try each, print one JSON object {"host:port": true | "why not"}
NCCL and Gloo hang on a partially open TCP range instead of failing, so this runs before launch.
"""

import json
import socket
import sys
import threading
import time


def listen(ports, seconds):
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
        threading.Thread(target=_accept, args=(s,), daemon=True).start()
    print(json.dumps(status), flush=True)
    time.sleep(seconds)


def _accept(sock):
    while True:
        conn, _ = sock.accept()
        conn.close()


def probe(targets, timeout=5.0, parallel=16):
    """Targets in parallel (bounded): with 32 nodes a sequential probe of a few blocked ports
    would outlast the listeners, and all at once would flood their accept queues."""
    results = {}
    gate = threading.Semaphore(parallel)

    def one(target):
        host, port = target.rsplit(":", 1)
        with gate:
            try:
                socket.create_connection((host, int(port)), timeout=timeout).close()
                results[target] = True
            except OSError as err:  # the reason tells a firewall (timeout) from no listener
                results[target] = getattr(err, "strerror", None) or str(err) or "timed out"

    threads = [threading.Thread(target=one, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps(results))


if __name__ == "__main__":
    if sys.argv[1] == "listen":
        listen([int(p) for p in sys.argv[3:]], float(sys.argv[2]))
    else:
        probe(sys.argv[2:])

"""Process-group formation over real TCP, as torch.distributed does it at --dist-init-addr.

Node rank 0 listens on the dist-init port (on SGLANG_HOST_IP when set, like a store bound to the
node's own address, else on every address); the other ranks connect, retrying until the
timeout, and announce {"rank", "nnodes"}. The group forms only when ranks 0..N-1 are each
present exactly once; a duplicate or a missing rank never forms, and every rank gives up at
the timeout. After forming, the connections stay open. When a rank's process dies, the
survivors hang by default, as real ranks do in a collective that never completes: they keep
running (rank 0 keeps accepting requests and never answers them) until the watchdog fires at
--dist-timeout. A node that vanishes closes no socket at all, so nobody notices before then.
With on_peer_loss="abort" (faults.json) a lost connection aborts every rank at once instead.

Wire format: one JSON object per line.
"""
import json
import socket
import threading
import time

from common import EngineExit, fatal
from wire import lines as _lines
from wire import send as _send

LOG_EVERY = 10.0  # torch logs its store-barrier wait about every 10 s


def parse_addr(text):
    """(host, port, is_ipv6) from host:port, [v6]:port or a bare v6 address with a port."""
    if text.startswith("["):
        host, _, port = text[1:].partition("]:")
        return host, int(port), True
    if text.count(":") > 1:
        host, _, port = text.rpartition(":")
        return host, int(port), True
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise ValueError(text)
    return host, int(port), False


def barrier_line(rank, world, joined, timeout):
    return (f"[I] Waiting in store based barrier to initialize process group for rank: {rank}, "
            f"key: store_based_barrier_key:1 (world_size={world}, num_workers_joined={joined}, "
            f"timeout={_hms(timeout)} error=None)")


def _hms(seconds):
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _store_timeout(timeout, joined, world):
    return EngineExit(f"torch.distributed.DistStoreError: Timed out after {int(timeout) + 1} "
                      f"seconds waiting for clients. {joined}/{world} clients joined.")


class Group:
    """One node's membership in the process group."""

    def __init__(self, log, rank, nnodes, addr, timeout, bind_ip=None, procs_per_node=1,
                 on_peer_loss="hang", on_hang=None):
        self.log, self.rank, self.nnodes, self.timeout = log, rank, nnodes, timeout
        self.on_peer_loss, self.on_hang, self.hung = on_peer_loss, on_hang, False
        self.ppn = procs_per_node   # torch counts processes (one per GPU), not nodes
        self.host, self.port, self.ipv6 = parse_addr(addr)
        self.bind_ip = bind_ip or "0.0.0.0"
        self.deadline = time.monotonic() + timeout
        self.lock = threading.Condition()
        self.members = {}    # rank -> list of connections (rank 0 itself: [None])
        self.loaded = set()
        self.formed = False
        self.conn = None     # a client's connection to rank 0
        # collective.py's forward steps once formed: rank 0 hears each step_done, a client
        # each step and commit.
        self.on_step_done = self.on_message = None

    # ---- shared ---------------------------------------------------------------------------
    def _barrier(self, joined):
        return barrier_line(self.rank * self.ppn, self.nnodes * self.ppn, joined * self.ppn,
                            self.timeout)

    def _timeout(self, joined):
        if joined >= self.nnodes:
            # Everyone reached the store, but a rank is doubled and another missing: the
            # first collective (NCCL init) waits for the missing rank until the timeout.
            ms = int(self.timeout * 1000)
            return EngineExit(
                f"torch.distributed.DistBackendError: [Rank {self.rank * self.ppn}] Watchdog "
                "caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, "
                f"NumelIn=1, NumelOut=1, Timeout(ms)={ms}) ran for {ms + 1} milliseconds before "
                "timing out.")
        return _store_timeout(self.timeout, joined * self.ppn, self.nnodes * self.ppn)

    def form(self):
        if self.ipv6:
            return self._hang_on_ipv6()
        if self.rank == 0:
            return self._form_as_master()
        return self._form_as_client()

    def _hang_on_ipv6(self):
        # Upstream (sglang#2892, #7478): an IPv6 init address fails to connect, silently.
        time.sleep(max(0.0, self.deadline - time.monotonic()))
        raise EngineExit(f"torch.distributed.DistNetworkError: The client socket has timed out "
                         f"after {int(self.timeout * 1000)}ms while trying to connect to "
                         f"({self.host}, {self.port}).")

    # ---- rank 0 ---------------------------------------------------------------------------
    def _listen(self):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        for ip in dict.fromkeys([self.bind_ip, "0.0.0.0"]):
            try:
                sock.bind((ip, self.port))
                sock.listen(64)
                return sock
            except OSError as e:
                if e.errno != 99:  # EADDRNOTAVAIL: SGLANG_HOST_IP is not ours; take any
                    sock.close()
                    raise EngineExit(
                        "torch.distributed.DistNetworkError: The server socket has failed to "
                        f"listen on any local network address. port: {self.port}, useIpv6: "
                        f"false, code: -{e.errno}, name: EADDRINUSE, message: address already "
                        "in use")
        raise EngineExit(f"torch.distributed.DistNetworkError: cannot listen on port {self.port}")

    def _form_as_master(self):
        self.listener = self._listen()
        self.members = {0: [None]}
        threading.Thread(target=self._accept_loop, daemon=True).start()
        next_log = 0.0
        with self.lock:
            while not self._complete():
                left = self.deadline - time.monotonic()
                if left <= 0:
                    raise self._timeout(self._joined())
                if time.monotonic() >= next_log:
                    self.log(self._barrier(self._joined()))
                    next_log = time.monotonic() + LOG_EVERY
                self.lock.wait(min(left, 0.2))
            self.formed = True
            for conns in self.members.values():
                for conn in conns:
                    if conn is not None:
                        _send(conn, {"event": "formed"})

    def _joined(self):
        return sum(len(c) for c in self.members.values())

    def _complete(self):
        return (set(self.members) == set(range(self.nnodes))
                and all(len(c) == 1 for c in self.members.values()))

    def _accept_loop(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            _no_delay(conn)
            threading.Thread(target=self._serve_member, args=(conn,), daemon=True).start()

    def _serve_member(self, conn):
        rank = None
        for msg in _lines(conn):
            with self.lock:
                if rank is None and "rank" in msg:
                    if self.formed:  # a late joiner cannot enter a formed group
                        conn.close()
                        return
                    rank = int(msg["rank"])
                    self.members.setdefault(rank, []).append(conn)
                    joined = self._joined()
                    for conns in self.members.values():
                        for other in conns:
                            if other is not None:
                                _send(other, {"event": "joined", "joined": joined})
                elif msg.get("event") == "loaded":
                    self.loaded.add(rank)
                elif msg.get("event") == "step_done" and self.on_step_done:
                    self.on_step_done(rank, msg)
                    continue
                self.lock.notify_all()
        with self.lock:
            if self.formed:
                self._peer_lost(f"node rank {rank}")
            if rank is not None and conn in self.members.get(rank, []):
                self.members[rank].remove(conn)
                if not self.members[rank]:
                    del self.members[rank]
            self.lock.notify_all()

    def wait_all_loaded(self):
        """Rank 0: every rank finished loading (its memory is needed for the KV pool sizing)."""
        with self.lock:
            self.loaded.add(0)
            while len(self.loaded) < self.nnodes:
                self.lock.wait(0.5)

    # ---- other ranks ----------------------------------------------------------------------
    def _connect(self, joined):
        last_log = -LOG_EVERY
        while time.monotonic() < self.deadline:
            try:
                conn = socket.create_connection((self.host, self.port), timeout=1.0)
                conn.settimeout(None)
                _no_delay(conn)
                return conn
            except OSError as e:
                if time.monotonic() - last_log >= LOG_EVERY:
                    self.log(f"[W socket.cpp:767] The client socket has failed to connect to "
                             f"[{self.host}]:{self.port} (errno: {e.errno or 110} - "
                             f"{e.strerror or 'Connection timed out'}).")
                    last_log = time.monotonic()
                time.sleep(0.5)
        if joined is not None:  # reached the store before: this is the barrier timing out
            raise self._timeout(joined)
        raise EngineExit(f"torch.distributed.DistNetworkError: The client socket has timed out "
                         f"after {int(self.timeout * 1000)}ms while trying to connect to "
                         f"({self.host}, {self.port}).")

    def _form_as_client(self):
        joined = None
        while True:
            conn = self._connect(joined)
            _send(conn, {"rank": self.rank, "nnodes": self.nnodes})
            outcome = self._await_formed(conn, joined or 0)
            if outcome == "formed":
                self.conn, self.formed = conn, True
                return
            joined = outcome
            conn.close()  # the store went away before forming: reconnect until the deadline

    def _await_formed(self, conn, joined):
        next_log = 0.0
        conn.settimeout(0.2)
        buf = b""
        while True:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise self._timeout(joined)
            if time.monotonic() >= next_log:
                self.log(self._barrier(joined))
                next_log = time.monotonic() + LOG_EVERY
            try:
                chunk = conn.recv(4096)
            except socket.timeout:
                continue
            except OSError:
                return joined
            if not chunk:
                return joined
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                msg = json.loads(line)
                if msg.get("event") == "formed":
                    conn.settimeout(None)
                    return "formed"
                joined = msg.get("joined", joined)

    def report_loaded(self):
        if self.conn is not None:
            _send(self.conn, {"event": "loaded"})

    def watch(self):
        """After forming: abort when the group breaks (rank 0 watches in _serve_member)."""
        if self.conn is None:
            return

        def watch_master():
            for msg in _lines(self.conn):
                if self.on_message is not None:
                    self.on_message(msg)
            self._peer_lost("node rank 0")

        threading.Thread(target=watch_master, daemon=True).start()

    def _peer_lost(self, who):
        if self.on_peer_loss == "abort":
            fatal(self._abort_text(who))
        if self.hung:
            return
        self.hung = True
        if self.on_hang is not None:
            self.on_hang()
        threading.Thread(target=self._watchdog, daemon=True).start()

    def _watchdog(self):
        """The collective in flight never completes; NCCL's watchdog ends it at the timeout."""
        time.sleep(self.timeout)
        ms = int(self.timeout * 1000)
        fatal(f"[E ProcessGroupNCCL.cpp:632] [Rank {self.rank * self.ppn}] Watchdog caught "
              f"collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, "
              f"NumelOut=1, Timeout(ms)={ms}) ran for {ms + 1} milliseconds before timing out.\n"
              "torch.distributed.DistBackendError: NCCL watchdog timeout; terminating the process.")

    def _abort_text(self, who):
        return (f"[E ProcessGroupNCCL.cpp:1537] [PG 0 Rank {self.rank}] Process group watchdog "
                f"thread terminated with exception: connection to {who} closed\n"
                "torch.distributed.DistBackendError: NCCL communicator was aborted: a peer "
                f"process ({who}) exited. Exiting this rank as well.")


def _no_delay(conn):
    """Each forward step is a few small messages each way (collective.py): with Nagle's
    algorithm a second write waits for the peer's delayed ACK (~40 ms on Linux), a latency no
    NCCL collective has: a 1024-step prefill over two ranks took 46 s with it, 0.3 s without."""
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

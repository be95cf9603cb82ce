"""The Ray head (GCS) stand-in: a TCP server that knows which nodes joined and places jobs.

Requests (first line of a connection):
- {"op": "join", node resources}: a worker; the connection stays open for as long as the node
  is in the cluster; it carries {"op": "load"|"release"} down and load replies up.
- {"op": "status"}: one reply {"nodes": [...], "used_gpus": N, "time": T}: what `ray status`
  prints. With a lag (node.json `ray_status_lag`, profile ray-2.60) it is the last snapshot,
  taken every `lag` seconds from `lag` after the head started, and {"nodes": null} before the
  first: real `ray status` prints the report the autoscaler monitor writes to the GCS once per
  update loop (python/ray/autoscaler/_private/monitor.py@ray-2.60.0: `_internal_kv_put(
  DEBUG_AUTOSCALING_STATUS, ...)`, then `time.sleep(AUTOSCALER_UPDATE_INTERVAL_S)`, which is 5 s
  in autoscaler/_private/constants.py), and "No cluster status. ..." while there is none
  (autoscaler/_private/commands.py debug_status).
- {"op": "job", "dp", "tp", "node", "model", "revision", "util"}: vLLM placing its DP ranks.
  Reply {"ok": false, "created", "available"} when the placement groups do not fit, else
  {"ok": true, "placement": [{"name", "gpus", "local"}]}, then later one
  {"event": "workers_loaded"} or {"event": "worker_failed", "node", "error"}, and
  {"event": "node_dead", "node"} if a node leaves while the job runs. The job ends when its
  connection closes; the workers then free their GPUs.
"""
import queue
import socket
import threading
import time

import ray_net
import wire
from common import EngineExit

WORKER_LOAD_TIMEOUT = 3600.0


class Head:
    def __init__(self, resources, port, status_lag=0.0):
        self.lock = threading.Lock()
        self.status_lag = float(status_lag or 0)
        self.snapshot = None             # the last report `ray status` shows (with a lag)
        me = dict(resources, head=True, id=ray_net.node_id(resources["name"], resources["ip"],
                                                            resources["pid"]))
        self.nodes = {me["id"]: me}      # id -> resources (+ conn, replies for workers)
        self.jobs = []                   # connections of running jobs
        self.used_gpus = 0
        self.port = port

    def listen(self):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", self.port))
        except OSError:
            sock.close()
            ip = next(iter(self.nodes.values()))["ip"]
            raise EngineExit(f"ConnectionError: Ray is trying to start at {ip}:{self.port}, but "
                             f"is already running at {ip}:{self.port}. Please specify a different "
                             "port using the `--port` flag of `ray start` command.")
        sock.listen(64)
        self.listener = sock

    def serve_forever(self):
        if self.status_lag > 0:
            threading.Thread(target=self._report_loop, daemon=True).start()
        while True:
            conn, _ = self.listener.accept()
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn):
        with conn:
            for msg in wire.lines(conn):
                op = msg.get("op")
                if op == "join":
                    return self._worker(conn, msg)
                if op == "status":
                    return wire.send(conn, self.status())
                if op == "job":
                    return self._job(conn, msg)
                return

    def status(self):
        if self.status_lag > 0:
            with self.lock:
                return self.snapshot or {"nodes": None}
        return self._live()

    def _live(self):
        with self.lock:
            nodes = [{k: n[k] for k in ("id", "name", "ip", "gpus", "cpus", "memory", "head")}
                     for n in self.nodes.values()]
            return {"nodes": nodes, "used_gpus": self.used_gpus, "time": time.time()}

    def _report_loop(self):
        """The autoscaler monitor's update loop: one report per interval."""
        while True:
            time.sleep(self.status_lag)
            report = self._live()
            with self.lock:
                self.snapshot = report

    # ---- workers --------------------------------------------------------------------------
    def _worker(self, conn, msg):
        node = {k: msg.get(k) for k in ("name", "ip", "pid", "gpus", "cpus", "memory")}
        node.update(head=False, conn=conn, replies=queue.Queue(),
                    id=ray_net.node_id(node["name"], node["ip"], node["pid"]))
        with self.lock:
            self.nodes[node["id"]] = node
        wire.send(conn, {"ok": True, "node_id": node["id"]})
        for reply in wire.lines(conn):
            node["replies"].put(reply)
        with self.lock:
            self.nodes.pop(node["id"], None)
            jobs = list(self.jobs)
        node["replies"].put({"ok": False, "error": f"node {node['name']} left the cluster"})
        for job in jobs:
            wire.send(job, {"event": "node_dead", "node": node["name"], "ip": node["ip"]})

    # ---- jobs -----------------------------------------------------------------------------
    def _placement(self, dp, tp, driver):
        with self.lock:
            nodes = sorted(self.nodes.values(), key=lambda n: (n["name"] != driver, not n["head"]))
        plan, left = [], dp
        for node in nodes:
            groups = min(left, int(node["gpus"]) // tp)
            left -= groups
            plan.append((node, groups * tp))
        return plan, dp - left

    def _available(self):
        with self.lock:
            res = {"CPU": float(sum(n["cpus"] for n in self.nodes.values())),
                   "GPU": float(sum(n["gpus"] for n in self.nodes.values()) - self.used_gpus),
                   "memory": float(sum(n["memory"] for n in self.nodes.values()))}
            for n in self.nodes.values():
                res[f"node:{n['ip']}"] = 1.0
        return res

    def _job(self, conn, msg):
        dp, tp = int(msg["dp"]), int(msg["tp"])
        plan, created = self._placement(dp, tp, msg.get("node"))
        if created < dp:
            return wire.send(conn, {"ok": False, "created": created,
                                    "available": self._available()})
        used = [(n, g) for n, g in plan if g]
        with self.lock:
            self.jobs.append(conn)
            self.used_gpus += sum(g for _, g in used)
        wire.send(conn, {"ok": True, "placement": [
            {"name": n["name"], "ip": n["ip"], "gpus": g, "local": n["name"] == msg.get("node")}
            for n, g in used]})
        remote = [(n, g) for n, g in used if not n["head"] and n["name"] != msg.get("node")]
        wire.send(conn, self._load_workers(remote, msg))
        for _ in wire.lines(conn):   # the job runs until vLLM goes away
            pass
        for node, _ in remote:
            wire.send(node["conn"], {"op": "release"})
        with self.lock:
            self.jobs.remove(conn)
            self.used_gpus -= sum(g for _, g in used)

    def _load_workers(self, remote, msg):
        for node, gpus in remote:
            request = {k: msg.get(k) for k in ("model", "revision", "util", "world")}
            wire.send(node["conn"], dict(request, op="load", gpus=gpus))
        for node, _ in remote:
            try:
                reply = node["replies"].get(timeout=WORKER_LOAD_TIMEOUT)
            except queue.Empty:
                reply = {"ok": False, "error": "timed out loading weights"}
            if not reply.get("ok"):
                return {"event": "worker_failed", "node": node["name"], "ip": node["ip"],
                        "error": reply.get("error", "")}
        return {"event": "workers_loaded"}

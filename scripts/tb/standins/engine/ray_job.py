"""vLLM's side of the Ray cluster: place DP x TP ranks through the head, wait for the workers
to load, and abort when a node leaves (see ray_head.py for the messages).

Without a reachable head and without RAY_ADDRESS, ray.init() starts a private local instance:
it holds only this node's GPUs, so a placement that needs more fails the same way.
"""
import socket
import threading
import time

import ray_net
import vllm_log as log
import wire
from common import EngineExit, fatal, say


def not_enough(dp, created, available):
    return (f"ValueError: Not enough resources to allocate {dp} placement groups, only created "
            f"{created} placement groups. Available resources: {available}")


def worker_failed(msg):
    """A DP rank's engine core on a worker node failed to start. Ray prefixes each line a remote
    actor prints with "(ActorName pid=N, ip=ADDR)" (python/ray/_private/worker.py
    print_worker_logs), under the APIServer's own prefix, as in the two-node log of
    ray-project/kuberay#4366 (vLLM 0.11.0); the actor is vLLM's DPEngineCoreActor
    (v1/engine/utils.py), its failure run_engine_core's "EngineCore failed to start." (v1/engine/
    core.py); the API server then raises wait_for_engine_startup's RuntimeError."""
    actor = f"{log.prefix('APIServer')} (DPEngineCoreActor pid={msg.get('pid', 0)}, ip={msg.get('ip')})"
    stamp = time.strftime("%m-%d %H:%M:%S")
    lines = [f"{actor} ERROR {stamp} [core.py:708] EngineCore failed to start."]
    lines += [f"{actor} {line}" for line in str(msg.get("error")).splitlines()]
    lines.append(f"{log.prefix('APIServer')} RuntimeError: Engine core initialization failed. "
                 "See root cause above. Failed core proc(s): {}")
    return "\n".join(lines)


class Job:
    def __init__(self, ctx, model, revision, dp, tp, util, load_format="auto"):
        self.ctx, self.dp, self.tp = ctx, dp, tp
        self.request = {"op": "job", "dp": dp, "tp": tp, "node": ctx.node.get("name"),
                        "model": model, "revision": revision, "util": util, "world": dp * tp,
                        "load_format": load_format}
        self.conn = self.messages = None

    def _connect(self):
        explicit = self.ctx.env.get("RAY_ADDRESS") not in (None, "", "auto")
        address = ray_net.cluster_address(self.ctx) or "127.0.0.1:6379"
        try:
            self.conn = socket.create_connection(ray_net.split_address(address), timeout=5)
            self.conn.settimeout(None)
        except OSError:
            if explicit:
                raise EngineExit(ray_net.NO_CLUSTER)
            return None
        # ray 2.60.0 python/ray/_private/worker.py:1841 (ray.init inside vllm serve)
        say(ray_net.ray_log(f"Connecting to existing Ray cluster at address: {address}...",
                            "worker.py:1841"))
        return address

    def place(self):
        """GPUs the ranks use on this node; raises when the cluster is too small."""
        if self._connect() is None:
            say(ray_net.ray_log("Started a local Ray instance.", "worker.py:2038"))
            created = self.ctx.gpus // self.tp
            if created < self.dp:
                raise EngineExit(not_enough(self.dp, created, {"GPU": float(self.ctx.gpus)}))
            return self.dp * self.tp
        wire.send(self.conn, self.request)
        self.messages = wire.lines(self.conn)
        reply = next(self.messages, None)
        if reply is None:
            raise EngineExit(ray_net.NO_CLUSTER)
        if not reply.get("ok"):
            raise EngineExit(not_enough(self.dp, reply["created"], reply["available"]))
        return sum(p["gpus"] for p in reply["placement"] if p["local"])

    def wait_workers_loaded(self):
        if self.messages is None:
            return
        msg = next(self.messages, None)
        if msg is None:
            raise EngineExit("ray.exceptions.RaySystemError: the Ray head (GCS) went away while "
                             "the engine was starting")
        if msg.get("event") == "worker_failed":
            raise EngineExit(worker_failed(msg))
        if msg.get("event") == "node_dead":
            raise EngineExit(self._node_lost(msg))

    def watch(self):
        """While serving: a node leaving or the head dying kills the engine."""
        if self.messages is None:
            return

        def watch_cluster():
            for msg in self.messages:
                if msg.get("event") == "node_dead":
                    fatal(self._node_lost(msg))
            fatal("ray.exceptions.RaySystemError: lost the connection to the Ray head (GCS); "
                  "the engine cannot continue")

        threading.Thread(target=watch_cluster, daemon=True).start()

    def _node_lost(self, msg):
        return ("ray.exceptions.RayActorError: The actor died unexpectedly before finishing this "
                f"task. The actor's node {msg.get('node')} ({msg.get('ip')}) left the cluster.\n"
                "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See "
                "stack trace (above) for the root cause.")

"""A Ray worker node (`ray start --address=HEAD:6379`): joins the head over a TCP connection it
keeps open, and loads vLLM's DP ranks placed on it: checks this node's own copy of the weights
(through this container's mounts), takes the node's load time, reports GPU memory.
"""
import os
import socket
import threading
import time

import ray_net
import startfaults
import weights
import wire
from common import EngineExit, fatal, say

JOIN_RETRY_SECONDS = 5.0
LOAD_SHORT_FACTOR = 0.4


def unable_to_connect(address):
    return (f"ConnectionError: Unable to connect to GCS (ray head) at {address}. Check that (1) "
            "Ray with matching version started successfully at the specified address, (2) this "
            "node can reach the specified address, and (3) there is no firewall setting "
            "preventing access.")


class Worker:
    def __init__(self, ctx, address, resources):
        self.ctx, self.address, self.resources = ctx, address, resources
        self.conn = None

    def join(self):
        deadline = time.monotonic() + JOIN_RETRY_SECONDS
        while True:
            try:
                self.conn = socket.create_connection(ray_net.split_address(self.address), 2.0)
                self.conn.settimeout(None)
                break
            except OSError:
                if time.monotonic() >= deadline:
                    raise EngineExit(unable_to_connect(self.address))
                time.sleep(0.5)
        wire.send(self.conn, dict(self.resources, op="join"))
        reply = next(wire.lines(self.conn), None)
        if not reply or not reply.get("ok"):
            raise EngineExit(unable_to_connect(self.address))

    def serve_forever(self):
        for msg in wire.lines(self.conn):
            if msg.get("op") == "load":
                threading.Thread(target=self._load, args=(msg,), daemon=True).start()
            elif msg.get("op") == "release":
                self.ctx.clear_gpu_memory()
        self.ctx.clear_gpu_memory()
        fatal(f"[raylet] The node with node id {self.resources['name']} lost its connection to "
              f"the GCS at {self.address}; the raylet exits (the head node is gone).")

    def _load(self, msg):
        try:
            self._load_ranks(msg)
            wire.send(self.conn, {"ok": True})
        except (EngineExit, weights.LoadError) as e:
            wire.send(self.conn, {"ok": False, "error": getattr(e, "message", str(e))})

    def _load_ranks(self, msg):
        ctx = self.ctx
        dummy = msg.get("load_format") == "dummy"
        snap = weights.resolve(ctx, msg["model"], msg.get("revision"), dummy=dummy)
        need, phys, oom_at = weights.memory_fit(snap, int(msg["world"]), ctx.gpu_mem_mib)
        tag = f"(RayWorkerWrapper pid={os.getpid()}, ip={self.resources['ip']})"
        try:
            # No progress here: vLLM 0.33 draws its loading bar on torch.distributed rank 0
            # only (model_loader/weight_utils.py enable_tqdm), and a Ray worker's own output
            # goes to its session's worker-*.out for the driver, not to this container's log.
            if dummy:
                weights.load_dummy(oom_at)
            else:
                weights.load(snap, ctx.load_seconds, lambda d, t, e: None, oom_at)
            startfaults.vllm_kv_cache(ctx)
        except weights.LoadError as e:
            raise EngineExit(weights.oom_text(ctx.gpu_mem_mib, need, phys)
                             if str(e) == "oom" else str(e))
        used = int(float(msg.get("util") or 0.9) * ctx.gpu_mem_mib)
        if ctx.faults().get("load_short"):
            used = int(used * LOAD_SHORT_FACTOR)
            say(f"{tag} WARNING: loaded only part of this rank's expert weights "
                "(short read from the cache); the rest were left uninitialized.")
        ctx.report_gpu_memory([used] * int(msg["gpus"]))

"""vLLM's API server gives its engine cores VLLM_ENGINE_READY_TIMEOUT_S per ready message.

MPClient.__init__ (vllm-project/vllm@364631ab vllm/v1/engine/core_client.py) waits on its input
socket for one ready message per engine core it manages, every core of the DP group with the
mp executor's internal load balancing: `sync_input_socket.poll(timeout=VLLM_ENGINE_READY_TIMEOUT_S
* 1000)` before each one, and a poll that times out raises TimeoutError("Timed out waiting for
engine core processes to start. This is often caused by slow weight loading for large models.
Waited {N}s (configured by VLLM_ENGINE_READY_TIMEOUT_S). To increase the timeout, set the
environment variable: VLLM_ENGINE_READY_TIMEOUT_S=<seconds>"). envs.py reads it as
int(os.environ.get("VLLM_ENGINE_READY_TIMEOUT_S", "600")). An engine core sends its ready
message after its weights loaded and its kernels compiled (EngineCore's start-up), so a load
longer than the timeout ends the API server however well it goes.

The clock here runs on the node's `watchdog_time_scale` (node.json, default 1), the scale the
stand-ins use for the engines' own timeouts, so a test keeps the real ratio of load to timeout.
"""
import threading
import time

from common import fatal

DEFAULT_SECONDS = 600
POLL = 0.05


def configured(env):
    """The timeout as envs.py reads it (an int; a value int() refuses fails as vLLM's would)."""
    return int(env.get("VLLM_ENGINE_READY_TIMEOUT_S", str(DEFAULT_SECONDS)))


class ReadyClock:
    """Started when the API server begins waiting; `progress()` counts the ready messages in
    (a node's engine cores report together), `needed` of them end the wait."""

    def __init__(self, ctx, progress, needed):
        self.seconds = configured(ctx.env)
        scale = float(ctx.node.get("watchdog_time_scale", 1.0) or 1.0)
        self.limit, self.progress, self.needed = self.seconds * scale, progress, needed
        self.done = threading.Event()
        threading.Thread(target=self._watch, name="ready-clock", daemon=True).start()

    def stop(self):
        self.done.set()

    def _watch(self):
        seen, since = self.progress(), time.monotonic()
        while not self.done.wait(POLL):
            count = self.progress()
            if count >= self.needed:
                return
            if count > seen:
                seen, since = count, time.monotonic()
            elif time.monotonic() - since > self.limit:
                fatal("Traceback (most recent call last):\n  File \"/usr/local/lib/python3.12/"
                      "dist-packages/vllm/v1/engine/core_client.py\", in __init__\n"
                      "TimeoutError: Timed out waiting for engine core processes to start. This "
                      "is often caused by slow weight loading for large models. Waited "
                      f"{self.seconds}s (configured by VLLM_ENGINE_READY_TIMEOUT_S). To increase "
                      "the timeout, set the environment variable: "
                      "VLLM_ENGINE_READY_TIMEOUT_S=<seconds>")

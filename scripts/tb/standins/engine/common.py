"""What every stand-in engine shares: the node it runs on, the container it runs in, logging,
the fault hooks and the memory report nvidia-smi reads.

The docker stand-in starts entry.py with the container's env plus K3TB_RUN (node runtime dir)
and K3TB_CONTAINER (the container's config.json). Without K3TB_CONTAINER (a test running the
engine directly) paths are taken as they are and every GPU of the node is visible.
"""
import datetime
import json
import os
import sys
import threading
import time

DEFAULT_RUN_DIR = "/run/k3tb"


class EngineExit(Exception):
    """Stop the engine: print `message` to stderr and exit with `code`."""

    def __init__(self, message, code=1):
        super().__init__(message)
        self.message, self.code = message, code


def read_json(path, default=None):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def atomic_write_json(path, data):
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def say(line, stream=None):
    """One log line, flushed at once so `docker logs -f` shows it as it happens."""
    stream = stream or sys.stdout
    stream.write(line + "\n")
    stream.flush()


def fatal(message, code=1):
    """Exit from any thread (a lost peer, a crash fault): threads cannot raise into main."""
    say(message, sys.stderr)
    os._exit(code)


def now_stamp():
    return datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")


class Container:
    """The container's config.json as the docker stand-in wrote it (or none)."""

    def __init__(self, config):
        self.config = config or {}
        self.present = config is not None

    @property
    def id(self):
        return self.config.get("id") or "host"

    @property
    def image(self):
        return self.config.get("image", "")

    @property
    def env(self):
        return dict(self.config.get("env") or {})

    def host_path(self, path):
        """Where a path inside the container lives on the node, or None when it is in the
        image's own filesystem (which holds no model weights and no config files)."""
        if not self.present:
            return path
        path = os.path.normpath(path)
        best = None
        for mount in self.config.get("mounts") or []:
            inside = os.path.normpath(mount.get("container", ""))
            if path == inside or path.startswith(inside.rstrip("/") + "/"):
                if best is None or len(inside) > len(best[0]):
                    best = (inside, mount.get("host", ""))
        if best is None:
            return None
        rest = os.path.relpath(path, best[0])
        return best[1] if rest == "." else os.path.join(best[1], rest)

    def visible_gpus(self, node_gpus):
        """GPUs the container was given with --gpus (docker gives none without the flag)."""
        if not self.present:
            return node_gpus
        if isinstance(self.config.get("gpu_indices"), list):  # resolved by the docker stand-in
            return min(node_gpus, len(self.config["gpu_indices"]))
        gpus = str(self.config.get("gpus") or "").strip().strip("'\"")
        if not gpus:
            return 0
        if gpus.startswith("device="):
            return min(node_gpus, len([d for d in gpus[7:].split(",") if d.strip()]))
        if gpus.isdigit():
            return min(node_gpus, int(gpus))
        return node_gpus


class Context:
    """Everything an engine needs to know about where it runs."""

    def __init__(self):
        self.run_dir = os.environ.get("K3TB_RUN") or DEFAULT_RUN_DIR
        self.node = read_json(os.path.join(self.run_dir, "node.json"), None)
        if self.node is None:
            raise EngineExit(f"stand-in engine: no node facts at {self.run_dir}/node.json")
        config_path = os.environ.get("K3TB_CONTAINER")
        self.container = Container(read_json(config_path, {}) if config_path else None)
        self.exec_mode = os.environ.get("K3TB_EXEC") == "1"
        # The docker stand-in gives this process the container's env (plus `docker exec -e`);
        # config.json's env fills in when run by hand.
        self.env = {**self.container.env, **os.environ}
        self.gpus = self.container.visible_gpus(int(self.node.get("gpu_count", 0)))

    @property
    def gpu_mem_mib(self):
        return int(self.node.get("gpu_mem_mib", 0))

    @property
    def load_seconds(self):
        return float(self.node.get("engine_load_seconds", 2.0))

    @property
    def sglang_version(self):
        """(major, minor, patch) of the SGLang the image is built on (profile sglang-*)."""
        text = str(self.node.get("sglang_version") or "0.5.16")
        return tuple(int(part) for part in text.split(".")[:3])

    @property
    def import_seconds(self):
        """How long `import torch, sglang|vllm` takes before the arguments are parsed
        (profile slow-engine-start)."""
        return float(self.node.get("engine_import_seconds", 0) or 0)

    @property
    def warmup_seconds(self):
        """SGLang's warm-up request after the HTTP server came up (/health answers 503)."""
        return float(self.node.get("engine_warmup_seconds", 0.5) or 0)

    @property
    def decode_tok_s(self):
        """Single-stream decode rate the HTTP side paces tokens at (0: no pacing)."""
        return float(self.node.get("decode_tok_s", 0) or 0)

    def faults(self):
        return read_json(os.path.join(self.run_dir, "faults.json"), {}) or {}

    def report_gpu_memory(self, used_mib):
        """nvidia-smi shows these numbers for as long as this process lives."""
        used = list(used_mib) + [0] * (int(self.node.get("gpu_count", 0)) - len(used_mib))
        atomic_write_json(os.path.join(self.run_dir, "gpu.json"),
                          {"pid": os.getpid(), "used_mib": used})

    def clear_gpu_memory(self):
        path = os.path.join(self.run_dir, "gpu.json")
        if (read_json(path, {}) or {}).get("pid") == os.getpid():
            try:
                os.unlink(path)
            except OSError:
                pass


def arm_crash_fault(ctx, describe_crash):
    """faults.json {"crash_after_seconds": S}: die S seconds after start, as a real rank does
    when a kernel faults; describe_crash() returns the traceback text to print."""
    seconds = ctx.faults().get("crash_after_seconds")
    if seconds is None:
        return

    def crash():
        time.sleep(float(seconds))
        fatal(describe_crash())

    threading.Thread(target=crash, daemon=True).start()


def block_forever():
    while True:
        time.sleep(3600)

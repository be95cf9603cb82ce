"""Run the stand-in engines (scripts/tb/standins/engine) as real processes on loopback, for the
test_standin_*.py modules: fake nodes (a K3TB_RUN dir with node.json), containers (config.json
as the docker stand-in writes it), a tiny generated HF cache, and HTTP helpers.

No root needed. Every process a Cluster starts is killed by close(), pass or fail.
"""
import json
import os
import signal
import socket
import struct
import subprocess
import time
import urllib.error
import urllib.request

import pytest

ENGINE_DIR = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", "..", "scripts",
                                           "tb", "standins", "engine"))
ENTRY = os.path.join(ENGINE_DIR, "entry.py")
PYTHON = "/usr/bin/python3"  # the node's Debian python, stdlib only
SGLANG_IMAGE = "lmsysorg/sglang:kimi-k3"
VLLM_IMAGE = "vllm/vllm-openai:kimi-k3"
SHA = "0123456789abcdef0123456789abcdef01234567"
SHARDS = 12
GPUS = {"h100": ("NVIDIA H100 80GB HBM3", 81559), "b200": ("NVIDIA B200", 183359),
        "b300": ("NVIDIA B300 SXM6 AC", 275040)}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_shard(path, nbytes):
    header = json.dumps({"w": {"dtype": "U8", "shape": [nbytes], "data_offsets": [0, nbytes]},
                         "__metadata__": {"format": "pt"}}).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + b"\0" * nbytes)


def shard_name(i):
    return f"model-{i:05d}-of-{SHARDS:05d}.safetensors"


def make_hf_cache(root):
    """A cached moonshotai/Kimi-K3 snapshot with SHARDS tiny but well-formed shards."""
    repo = root / "hf" / "hub" / "models--moonshotai--Kimi-K3"
    snap = repo / "snapshots" / SHA
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(SHA)
    weight_map = {}
    for i in range(1, SHARDS + 1):
        write_shard(snap / shard_name(i), 64 + i)
        weight_map[f"layer.{i}.weight"] = shard_name(i)
    (snap / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (snap / "config.json").write_text(json.dumps({"max_position_embeddings": 1048576}))
    return root / "hf", snap


def make_node(root, name, gpu="b300", gpus=8, cuda="13.0", load=0.4, faults=None):
    run = root / name
    run.mkdir(parents=True)
    gpu_name, mem = GPUS[gpu]
    (run / "node.json").write_text(json.dumps({
        "name": name, "gpu": gpu, "gpu_name": gpu_name, "gpu_count": gpus, "gpu_mem_mib": mem,
        "cuda": cuda, "driver": "580.65.06", "engine_load_seconds": load,
        "nvidia_toolkit": True}))
    if faults:
        (run / "faults.json").write_text(json.dumps(faults))
    return run


class Cluster:
    """Starts engine processes and guarantees they are gone afterwards."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.hf, self.snapshot = make_hf_cache(tmp_path)
        self.procs, self.run_dirs = [], []

    def container(self, run, cmd, image=SGLANG_IMAGE, env=None, mounts=None, gpus="all",
                  hf=None):
        config = {"id": f"c{len(self.procs)}-{run.name}", "name": "sgl", "image": image,
                  "cmd": cmd, "env": env or {}, "gpus": gpus, "network": "host", "labels": {},
                  "mounts": [{"host": str(hf or self.hf), "container": "/root/.cache/huggingface",
                              "ro": False}] + (mounts or [])}
        path = run / f"container-{len(self.procs)}.json"
        path.write_text(json.dumps(config))
        return path

    def env(self, run, config, exec_argv=None):
        """As the docker stand-in builds it: the container's env plus the contract variables."""
        env = dict(json.loads(config.read_text())["env"], K3TB_RUN=str(run),
                   K3TB_CONTAINER=str(config))
        if exec_argv is not None:
            env.update(K3TB_EXEC="1", K3TB_EXEC_ARGV=json.dumps(exec_argv))
        return env

    def start(self, run, cmd, **kw):
        config = self.container(run, cmd, **kw)
        log = open(run / f"log-{len(self.procs)}.txt", "w+")
        proc = subprocess.Popen([PYTHON, ENTRY, *cmd], env=self.env(run, config), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        proc.log_file, proc.config = log, config
        self.procs.append(proc)
        self.run_dirs.append(run)
        return proc

    def run(self, run, cmd, timeout=20, exec_in=None, container=True, raw=False, **kw):
        """Run to completion. exec_in: a running container's config (`docker exec`);
        container=False: no container at all (the command on the node itself); raw: output as
        bytes (text mode turns a CR into a LF)."""
        self.run_dirs.append(run)
        if not container:
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "K3TB_RUN": str(run)}
            return subprocess.run([PYTHON, ENTRY, *cmd], env=env, capture_output=True,
                                  text=True, timeout=timeout)
        config = exec_in or self.container(run, cmd, **kw)
        return subprocess.run([PYTHON, ENTRY, *cmd],
                              env=self.env(run, config, cmd if exec_in else None),
                              capture_output=True, text=not raw, timeout=timeout)

    def close(self):
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            proc.log_file.close()
        for run in self.run_dirs:   # daemonized Ray processes record their pids
            for pid_file in run.glob("ray/*/pids/*"):
                kill_engine_pid(int(pid_file.name))


def kill_engine_pid(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if ENTRY.encode() not in f.read():
                return
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def log_of(proc):
    proc.log_file.flush()
    with open(proc.log_file.name) as f:
        return f.read()


def wait_exit(proc, timeout):
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"process still running after {timeout}s:\n{log_of(proc)}")


def http(port, path, body=None, key=None, raw=None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            text = resp.read()
            return resp.status, (json.loads(text) if text else None)
    except urllib.error.HTTPError as e:
        text = e.read()
        return e.code, (json.loads(text) if text else None)


def wait_health(port, proc, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"engine exited {proc.returncode}:\n{log_of(proc)}")
        try:
            if http(port, "/health")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    pytest.fail(f"no healthy /health on {port}:\n{log_of(proc)}")


def sglang_cmd(port, *extra, tp=8):
    return ["sglang", "serve", "--model-path", "moonshotai/Kimi-K3", "--trust-remote-code",
            "--tp-size", str(tp), "--ep-size", str(tp), "--host", "127.0.0.1", "--port",
            str(port), *extra]


def gpu_report(run):
    return json.loads((run / "gpu.json").read_text())


CHAT = {"model": "moonshotai/Kimi-K3", "max_tokens": 256, "reasoning_effort": "low",
        "messages": [{"role": "user", "content": "Explain expert parallelism in two sentences."}]}
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "required": ["city"],
                                          "properties": {"city": {"type": "string"}}}}}]


def vllm_cmd(port, dp, *extra):
    return ["vllm", "serve", "moonshotai/Kimi-K3", "--data-parallel-size", str(dp),
            "--enable-expert-parallel", "--host", "127.0.0.1", "--port", str(port),
            "--tool-call-parser", "kimi_k3", "--reasoning-parser", "kimi_k3",
            "--max-model-len", "131072", "--trust-remote-code", *extra]


def health_or_none(port):
    """/health's status, or None while nothing listens on the port yet."""
    try:
        return http(port, "/health")[0]
    except OSError:
        return None


def wait_for_line(proc, text, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in log_of(proc):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    pytest.fail(f"{text!r} not in the log:\n{log_of(proc)}")

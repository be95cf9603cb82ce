"""The stand-in engines (scripts/tb/standins/engine) run as real processes on loopback.

No root needed: each "node" is a temp K3TB_RUN with its own node.json, each "container" a
config.json the way the docker stand-in writes it, the HF cache a tiny generated snapshot.
Every process a test starts is killed when the test ends, pass or fail.
"""
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from polling import wait_until

ENGINE_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "tb", "standins",
                          "engine")
ENTRY = os.path.realpath(os.path.join(ENGINE_DIR, "entry.py"))
PYTHON = "/usr/bin/python3"  # the node's Debian python, stdlib only
SGLANG_IMAGE = "lmsysorg/sglang:kimi-k3"
VLLM_IMAGE = "vllm/vllm-openai:kimi-k3"
SHA = "0123456789abcdef0123456789abcdef01234567"
SHARDS = 12
GPUS = {"h100": ("NVIDIA H100 80GB HBM3", 81559), "b200": ("NVIDIA B200", 183359),
        "b300": ("NVIDIA B300 SXM6 AC", 275040)}

sys.path.insert(0, os.path.realpath(ENGINE_DIR))
import configfile  # noqa: E402
import weights  # noqa: E402


# ---- fixtures: nodes, weights, containers, processes ---------------------------------------
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

    def run(self, run, cmd, timeout=20, exec_in=None, container=True, **kw):
        """Run to completion. exec_in: a running container's config (`docker exec`);
        container=False: no container at all (the command on the node itself)."""
        self.run_dirs.append(run)
        if not container:
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "K3TB_RUN": str(run)}
            return subprocess.run([PYTHON, ENTRY, *cmd], env=env, capture_output=True,
                                  text=True, timeout=timeout)
        config = exec_in or self.container(run, cmd, **kw)
        return subprocess.run([PYTHON, ENTRY, *cmd],
                              env=self.env(run, config, cmd if exec_in else None),
                              capture_output=True, text=True, timeout=timeout)

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


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.close()


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


# ---- strict flags, weights, CUDA --------------------------------------------------------------
def test_unknown_flags_exit_2_with_usage(cluster, tmp_path):
    run = make_node(tmp_path, "node0")
    sgl = cluster.run(run, sglang_cmd(free_port(), "--enable-magic"))
    assert sgl.returncode == 2
    assert "usage: sglang serve" in sgl.stderr
    assert "error: unrecognized arguments: --enable-magic" in sgl.stderr
    bad_parser = cluster.run(run, sglang_cmd(free_port(), "--reasoning-parser", "kimi_k9"))
    assert bad_parser.returncode == 2 and "invalid choice: 'kimi_k9'" in bad_parser.stderr
    vllm = cluster.run(run, ["vllm", "serve", "moonshotai/Kimi-K3", "--tp-sizee", "8"],
                       image=VLLM_IMAGE)
    assert vllm.returncode == 2 and "unrecognized arguments: --tp-sizee" in vllm.stderr
    ray = cluster.run(run, ["ray", "start", "--head", "--bogus"], image=VLLM_IMAGE)
    assert ray.returncode == 2 and "Error: No such option: --bogus" in ray.stderr


def test_aliases_of_the_single_node_launch_server_cell_parse(cluster, tmp_path):
    run = make_node(tmp_path, "node0", gpus=8)
    port = free_port()
    proc = cluster.start(run, ["python", "-m", "sglang.launch_server", "--model-path",
                               "moonshotai/Kimi-K3", "--tp", "8", "--ep-size", "8",
                               "--enable-dp-attention", "--dp", "8", "--context-length",
                               "1048576", "--host", "127.0.0.1", "--port", str(port)])
    wait_health(port, proc)
    assert http(port, "/v1/models")[1]["data"][0]["max_model_len"] == 1048576


def test_unknown_command_is_127_like_docker(cluster, tmp_path):
    result = cluster.run(make_node(tmp_path, "node0"), ["nginx", "-g", "daemon off;"])
    assert result.returncode == 127
    assert 'exec: "nginx": executable file not found in $PATH' in result.stderr


def test_a_container_without_gpus_finds_no_driver(cluster, tmp_path):
    result = cluster.run(make_node(tmp_path, "node0"), sglang_cmd(free_port()), gpus=None)
    assert result.returncode == 1 and "Found no NVIDIA driver" in result.stderr


def test_tp_size_must_cover_every_gpu(cluster, tmp_path):
    result = cluster.run(make_node(tmp_path, "node0", gpus=8), sglang_cmd(free_port(), tp=16))
    assert result.returncode == 1
    assert "--tp-size 16 needs 16 GPUs, but --nnodes 1 x 8 GPUs per node gives 8" in result.stderr


@pytest.mark.parametrize("damage", ["truncate", "delete"])
def test_incomplete_snapshot_fails_the_load_naming_the_shard(cluster, tmp_path, damage):
    shard = cluster.snapshot / shard_name(7)
    if damage == "truncate":
        with open(shard, "r+b") as f:
            f.truncate(shard.stat().st_size - 10)
    else:
        shard.unlink()
    result = cluster.run(make_node(tmp_path, "node0"), sglang_cmd(free_port()))
    assert result.returncode == 1
    assert shard_name(7) in result.stderr
    assert ("is incomplete" if damage == "truncate" else "is missing") in result.stderr
    assert "Loading safetensors checkpoint shards:" in result.stdout


def test_one_b200_node_runs_out_of_memory_late_in_the_load(cluster, tmp_path):
    result = cluster.run(make_node(tmp_path, "node0", gpu="b200"), sglang_cmd(free_port()))
    assert result.returncode == 1
    assert "torch.OutOfMemoryError: CUDA out of memory" in result.stderr
    assert f"{SHARDS - 1}/{SHARDS}" in result.stdout and "100% Completed" not in result.stdout


def test_uncached_model_offline_gives_the_hub_error(cluster, tmp_path):
    result = cluster.run(make_node(tmp_path, "node0"),
                         sglang_cmd(free_port(), "--revision", "f" * 40), env={"HF_HUB_OFFLINE": "1"})
    assert result.returncode == 1
    assert "LocalEntryNotFoundError: Cannot find an appropriate cached snapshot" in result.stderr


def test_cuda13_image_on_a_cuda12_driver_fails_but_cu12_tag_passes(cluster, tmp_path):
    run = make_node(tmp_path, "node0", cuda="12.8")
    bad = cluster.run(run, sglang_cmd(free_port()))
    assert bad.returncode == 1
    assert "driver on your system is too old (found version 12080)" in bad.stderr
    assert "CUDA version mismatch" in bad.stderr
    # Past the CUDA check the cu12 image reaches argument parsing (exit 2 on a bad flag).
    ok = cluster.run(run, sglang_cmd(free_port(), "--nope"), image="lmsysorg/sglang:kimi-k3-cu12")
    assert ok.returncode == 2 and "unrecognized arguments: --nope" in ok.stderr


def test_shard_check_reads_the_safetensors_header(tmp_path):
    path = tmp_path / "s.safetensors"
    write_shard(path, 100)
    assert weights.shard_problem(str(path)) is None
    with open(path, "ab") as f:
        f.write(b"x")
    assert weights.shard_problem(str(path)).startswith("incomplete")
    assert weights.shard_problem(str(tmp_path / "absent")) == "missing"


def test_config_file_yaml_subset_and_json():
    text = "api-key: 'sk-1 # not a comment'\nport: 8000  # comment\ntrust_remote_code: true\n"
    assert configfile.mapping_to_argv(configfile.parse_mapping(text, "f.yaml")) == [
        "--api-key", "sk-1 # not a comment", "--port", "8000", "--trust-remote-code"]
    assert configfile.parse_mapping('{"api-key": "k"}', "f.json") == {"api-key": "k"}


# ---- multi-node rendezvous --------------------------------------------------------------------
def four_node_cmd(port, dist_port, rank, timeout=30):
    return sglang_cmd(port, "--nnodes", "4", "--node-rank", str(rank), "--dist-init-addr",
                      f"127.0.0.1:{dist_port}", "--moe-runner-backend", "marlin",
                      "--decode-attention-backend", "flashmla", "--mem-fraction-static", "0.85",
                      "--dist-timeout", str(timeout), "--reasoning-parser", "kimi_k3",
                      "--tool-call-parser", "kimi_k3", tp=32)


def _four_ranks_serving(cluster, tmp_path, timeout=3600, faults=None):
    port, dist = free_port(), free_port()
    runs = [make_node(tmp_path, f"node{r}", gpu="h100", faults=faults) for r in range(4)]
    # Workers first: they retry until rank 0 listens, as the guide's launch order allows.
    procs = [cluster.start(runs[r], four_node_cmd(port, dist, r, timeout)) for r in (3, 1, 2)]
    head = cluster.start(runs[0], four_node_cmd(port, dist, 0, timeout),
                         env={"SGLANG_HOST_IP": "127.0.0.1", "SGLANG_HEALTH_CHECK_TIMEOUT": "1"})
    wait_health(port, head)
    return port, runs, head, procs


def test_four_ranks_form_a_group_and_rank0_serves_then_a_lost_rank_hangs_the_rest(cluster,
                                                                                  tmp_path):
    port, runs, head, procs = _four_ranks_serving(cluster, tmp_path, timeout=8)
    assert "The server is fired up and ready to roll!" in log_of(head)
    status, reply = http(port, "/v1/chat/completions", CHAT)
    assert status == 200 and reply["choices"][0]["message"]["reasoning_content"]
    for run in runs:   # ~71 GB of 81.5 GB per H100 on every node
        used = gpu_report(run)["used_mib"]
        assert len(used) == 8 and all(70000 < u < 72000 for u in used)
    assert all(p.poll() is None for p in procs)
    os.killpg(procs[1].pid, signal.SIGKILL)   # node rank 1 dies
    killed = time.monotonic()
    # As in real life: the survivors sit in the collective, rank 0 takes requests and never
    # answers them, its health check times out (here after 1 s) into 503.
    wait_until(lambda: http(port, "/health")[0] == 503, 15, "rank 0 to hang on the lost rank")
    with pytest.raises(OSError):  # urllib's timeout
        urllib.request.urlopen(urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/chat/completions", data=json.dumps(CHAT).encode(),
            headers={"Content-Type": "application/json"}), timeout=2)
    survivors = [head, procs[0], procs[2]]
    assert all(p.poll() is None for p in survivors)
    for proc in survivors:  # until the watchdog ends them at --dist-timeout (8 s)
        assert wait_exit(proc, 20) == 1
        assert "Watchdog caught collective operation timeout" in log_of(proc)
        assert "NCCL communicator was aborted" not in log_of(proc)
    assert time.monotonic() - killed >= 7


def test_on_peer_loss_abort_makes_every_rank_exit_at_once(cluster, tmp_path):
    _port, _runs, head, procs = _four_ranks_serving(cluster, tmp_path,
                                                    faults={"on_peer_loss": "abort"})
    os.killpg(procs[1].pid, signal.SIGKILL)
    for proc in [head, procs[0], procs[2]]:
        assert wait_exit(proc, 10) == 1
        assert "NCCL communicator was aborted" in log_of(proc)


def test_a_rank_whose_shard_is_short_fails_and_the_group_hangs(cluster, tmp_path):
    port, dist = free_port(), free_port()
    hf1, snap1 = make_hf_cache(tmp_path / "node1-disk")    # node1 has its own NVMe cache
    with open(snap1 / shard_name(11), "r+b") as f:
        f.truncate(40)
    cmd = lambda rank: sglang_cmd(port, "--nnodes", "2", "--node-rank", str(rank),  # noqa: E731
                                  "--dist-init-addr", f"127.0.0.1:{dist}", "--dist-timeout",
                                  "4", tp=8)
    head = cluster.start(make_node(tmp_path, "node0", gpus=4), cmd(0),
                         env={"SGLANG_HOST_IP": "127.0.0.1"})
    worker = cluster.start(make_node(tmp_path, "node1", gpus=4), cmd(1), hf=hf1)
    assert wait_exit(worker, 10) == 1
    assert f"{shard_name(11)} is incomplete" in log_of(worker)
    assert head.poll() is None  # waiting for a rank that will never report its load
    assert wait_exit(head, 15) == 1
    assert "Watchdog caught collective operation timeout" in log_of(head)


@pytest.mark.parametrize("mistake", ["two ranks 0", "two ranks 1"])
def test_a_duplicate_rank_never_forms_and_every_rank_times_out(cluster, tmp_path, mistake):
    port, dist = free_port(), free_port()
    runs = [make_node(tmp_path, f"node{i}", gpu="h100") for i in range(4)]
    if mistake == "two ranks 0":
        # node1 wrongly claims rank 0: it listens on its own address (and, being another
        # machine, its own HTTP port) and waits for nobody.
        ranks = [(0, "127.0.0.1", port), (0, "127.0.0.2", free_port()), (1, None, port),
                 (2, None, port)]
    else:
        ranks = [(0, "127.0.0.1", port), (1, None, port), (1, None, port), (2, None, port)]
    procs = [cluster.start(run, four_node_cmd(http_port, dist, rank, timeout=3),
                           env={"SGLANG_HOST_IP": ip} if ip else {})
             for run, (rank, ip, http_port) in zip(runs, ranks)]
    # Rank 0 answers, not ready: loading never starts without a group (every rank's barrier
    # timeout below proves it never formed).
    assert wait_until(lambda: health_or_none(port), 10, "rank 0's HTTP server") == 503
    for proc in procs:
        assert wait_exit(proc, 10) == 1
        log = log_of(proc)
        assert "Waiting in store based barrier" in log
        assert "world_size=32" in log      # torch counts one process per GPU: 4 nodes x 8
        assert ("DistStoreError: Timed out after 4 seconds waiting for clients" in log
                if mistake == "two ranks 0" else "ran for 3001 milliseconds" in log)
        assert "Loading safetensors" not in log
    assert not any((run / "gpu.json").exists() for run in runs)


def test_ipv6_dist_init_addr_hangs_until_the_timeout(cluster, tmp_path):
    run = make_node(tmp_path, "node1", gpus=4)
    cmd = sglang_cmd(free_port(), "--nnodes", "2", "--node-rank", "1", "--dist-init-addr",
                     f"[::1]:{free_port()}", "--dist-timeout", "2", tp=8)
    started = time.monotonic()
    result = cluster.run(run, cmd)
    assert result.returncode == 1 and time.monotonic() - started >= 2
    assert "DistNetworkError: The client socket has timed out after 2000ms" in result.stderr


# ---- the OpenAI API: parsers, tools, api key --------------------------------------------------
@pytest.fixture
def k3_server(cluster, tmp_path):
    """kimi_k3 parsers; the api key comes from a --config YAML file inside the container."""
    run = make_node(tmp_path, "node0")
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "engine.yaml").write_text("api-key: sk-test-key\nserved-model-name: kimi-k3\n")
    port = free_port()
    proc = cluster.start(run, sglang_cmd(port, "--reasoning-parser", "kimi_k3",
                                         "--tool-call-parser", "kimi_k3", "--config",
                                         "/etc/k3/engine.yaml"),
                         mounts=[{"host": str(conf_dir), "container": "/etc/k3", "ro": True}])
    wait_health(port, proc)
    return port


def test_kimi_k3_parser_splits_reasoning_and_counts_it_apart(k3_server):
    status, reply = http(k3_server, "/v1/chat/completions", CHAT, key="sk-test-key")
    assert status == 200
    message, usage = reply["choices"][0]["message"], reply["usage"]
    assert message["content"] and "<think>" not in message["content"]
    assert len(message["reasoning_content"].split()) == usage["reasoning_tokens"] > 0
    assert usage["completion_tokens_details"]["reasoning_tokens"] == usage["reasoning_tokens"]
    assert usage["total_tokens"] == (usage["prompt_tokens"] + usage["completion_tokens"]
                                     + usage["reasoning_tokens"])
    high = http(k3_server, "/v1/chat/completions", dict(CHAT, reasoning_effort="high"),
                key="sk-test-key")[1]
    assert high["usage"]["reasoning_tokens"] > usage["reasoning_tokens"]
    assert http(k3_server, "/v1/models", key="sk-test-key")[1]["data"][0]["id"] == "kimi-k3"


def test_kimi_k3_tool_parser_returns_tool_calls(k3_server):
    body = dict(CHAT, tools=TOOLS)
    reply = http(k3_server, "/v1/chat/completions", body, key="sk-test-key")[1]
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    call = choice["message"]["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}


def test_api_key_and_bad_json(k3_server):
    assert http(k3_server, "/v1/chat/completions", CHAT)[0] == 401
    assert http(k3_server, "/v1/chat/completions", CHAT, key="wrong")[0] == 401
    assert http(k3_server, "/v1/models")[0] == 401
    assert http(k3_server, "/health")[0] == 200          # health needs no key
    assert http(k3_server, "/health_generate")[0] == 200
    status, reply = http(k3_server, "/v1/chat/completions", raw=b"{not json", key="sk-test-key")
    assert status == 400 and reply["code"] == 400


def test_streaming_sends_reasoning_then_content_then_done(k3_server):
    req = urllib.request.Request(f"http://127.0.0.1:{k3_server}/v1/chat/completions",
                                 data=json.dumps(dict(CHAT, stream=True)).encode(),
                                 headers={"Authorization": "Bearer sk-test-key"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        events = [line[6:] for line in resp.read().decode().splitlines()
                  if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    deltas = [json.loads(e)["choices"][0]["delta"] for e in events[:-1]]
    assert any(d.get("reasoning_content") for d in deltas)
    assert any(d.get("content") for d in deltas)


def test_kimi_k2_parsers_leak_thinking_and_tool_markup_into_content(cluster, tmp_path):
    port = free_port()
    proc = cluster.start(make_node(tmp_path, "node0"),
                         sglang_cmd(port, "--reasoning-parser", "kimi_k2",
                                    "--tool-call-parser", "kimi_k2"))
    wait_health(port, proc)
    reply = http(port, "/v1/chat/completions", CHAT)[1]
    message = reply["choices"][0]["message"]
    assert message["content"].startswith("<think>") and "</think>" in message["content"]
    assert not message["reasoning_content"]
    assert reply["usage"]["reasoning_tokens"] == 0
    tools = http(port, "/v1/chat/completions", dict(CHAT, tools=TOOLS))[1]["choices"][0]
    assert tools["finish_reason"] == "stop" and not tools["message"]["tool_calls"]
    assert "functions.get_weather:0" in tools["message"]["content"]


# ---- fault hooks ------------------------------------------------------------------------------
def test_load_short_rank_still_serves_but_reports_little_memory(cluster, tmp_path):
    run = make_node(tmp_path, "node0", faults={"load_short": True})
    port = free_port()
    proc = cluster.start(run, sglang_cmd(port, "--mem-fraction-static", "0.85"))
    wait_health(port, proc)
    normal = 0.85 * GPUS["b300"][1]
    used = gpu_report(run)["used_mib"]
    assert gpu_report(run)["pid"] == proc.pid
    assert all(0.3 * normal < u < 0.5 * normal for u in used)
    assert "WARNING" in log_of(proc)


def test_crash_after_seconds_exits_1_with_a_traceback(cluster, tmp_path):
    run = make_node(tmp_path, "node0", faults={"crash_after_seconds": 1})
    proc = cluster.start(run, sglang_cmd(free_port()))
    assert wait_exit(proc, 10) == 1
    log = log_of(proc)
    assert "Traceback (most recent call last)" in log and "illegal memory access" in log


# ---- vLLM and Ray -------------------------------------------------------------------------------
def vllm_cmd(port, dp, *extra):
    return ["vllm", "serve", "moonshotai/Kimi-K3", "--data-parallel-size", str(dp),
            "--enable-expert-parallel", "--host", "127.0.0.1", "--port", str(port),
            "--tool-call-parser", "kimi_k3", "--reasoning-parser", "kimi_k3",
            "--max-model-len", "131072", "--trust-remote-code", *extra]


def test_vllm_single_b300_node(cluster, tmp_path):
    run = make_node(tmp_path, "node0", gpu="b300")
    port = free_port()
    proc = cluster.start(run, vllm_cmd(port, 8), image=VLLM_IMAGE,
                         env={"VLLM_API_KEY": "sk-vllm"})
    wait_health(port, proc)
    used = gpu_report(run)["used_mib"]
    assert used == [int(0.9 * GPUS["b300"][1])] * 8
    assert http(port, "/v1/models")[0] == 401
    models = http(port, "/v1/models", key="sk-vllm")[1]
    assert models["data"][0]["id"] == "moonshotai/Kimi-K3"
    assert models["data"][0]["max_model_len"] == 131072
    reply = http(port, "/v1/chat/completions", CHAT, key="sk-vllm")[1]
    message = reply["choices"][0]["message"]
    assert message["reasoning_content"] and message["reasoning"] == message["reasoning_content"]
    # The guide's vLLM command lacks --enable-auto-tool-choice: vLLM refuses "auto" tools.
    status, error = http(port, "/v1/chat/completions", dict(CHAT, tools=TOOLS), key="sk-vllm")
    assert status == 400 and "--enable-auto-tool-choice" in error["error"]["message"]


def test_vllm_ranks_must_match_the_node(cluster, tmp_path):
    run = make_node(tmp_path, "node0", gpu="b300")
    few = cluster.run(run, vllm_cmd(free_port(), 4), image=VLLM_IMAGE)
    assert few.returncode == 1 and "this node has 8 GPUs" in few.stderr
    parser = cluster.run(run, vllm_cmd(free_port(), 8, "--reasoning-parser", "kimi_k9"),
                         image=VLLM_IMAGE)
    assert parser.returncode == 1 and "invalid reasoning parser: kimi_k9" in parser.stderr
    # More ranks than GPUs and no Ray cluster: the private local instance is too small.
    alone = cluster.run(run, vllm_cmd(free_port(), 16), image=VLLM_IMAGE)
    assert alone.returncode == 1
    assert "Not enough resources to allocate 16 placement groups, only created 8" in alone.stderr


def test_vllm_on_two_b200_nodes_over_ray(cluster, tmp_path):
    head_run = make_node(tmp_path, "node0", gpu="b200")
    worker_run = make_node(tmp_path, "node1", gpu="b200")
    ray_port, port = free_port(), free_port()
    head = cluster.start(head_run, ["ray", "start", "--head", f"--port={ray_port}", "--block"],
                         image=VLLM_IMAGE)
    wait_for_line(head, "Ray runtime started.")
    env = {"RAY_ADDRESS": f"127.0.0.1:{ray_port}"}
    short = cluster.run(head_run, vllm_cmd(port, 16), image=VLLM_IMAGE, env=env)
    assert short.returncode == 1
    assert "Not enough resources to allocate 16 placement groups, only created 8" in short.stderr

    worker = cluster.start(worker_run, ["ray", "start", f"--address=127.0.0.1:{ray_port}",
                                        "--block"], image=VLLM_IMAGE)
    wait_for_line(worker, "Ray runtime started.")
    status = cluster.run(head_run, ["ray", "status"], exec_in=head.config)
    assert status.returncode == 0, status.stderr
    assert status.stdout.count(" 1 node_") == 2 and " 0.0/16.0 GPU" in status.stdout

    vllm = cluster.start(head_run, vllm_cmd(port, 16), image=VLLM_IMAGE, env=env)
    wait_health(port, vllm)
    assert gpu_report(head_run)["pid"] == vllm.pid
    assert gpu_report(worker_run)["pid"] == worker.pid           # the worker holds its ranks
    assert len([u for u in gpu_report(worker_run)["used_mib"] if u > 0]) == 8
    assert "16.0/16.0 GPU" in cluster.run(head_run, ["ray", "status"],
                                          exec_in=head.config).stdout
    assert http(port, "/v1/chat/completions", CHAT)[0] == 200

    os.killpg(worker.pid, signal.SIGKILL)                          # node1 is reclaimed
    assert wait_exit(vllm, 10) == 1
    assert "RayActorError" in log_of(vllm)


def test_ray_start_without_block_and_ray_stop(cluster, tmp_path):
    run = make_node(tmp_path, "node0", gpu="b200")
    ray_port = free_port()
    started = cluster.run(run, ["ray", "start", "--head", f"--port={ray_port}"],
                          image=VLLM_IMAGE)
    # As a container's main command without --block: banner, exit 0, nothing left running.
    assert started.returncode == 0 and "ray start --address=" in started.stdout
    assert cluster.run(run, ["ray", "status", f"--address=127.0.0.1:{ray_port}"],
                       image=VLLM_IMAGE).returncode == 1
    # Outside a container (or in `docker exec`) it daemonizes and runs until `ray stop`.
    daemon = cluster.run(run, ["ray", "start", "--head", f"--port={ray_port}"], container=False)
    assert daemon.returncode == 0, daemon.stderr
    status = cluster.run(run, ["ray", "status"], container=False)
    assert status.returncode == 0 and " 0.0/8.0 GPU" in status.stdout
    stop = cluster.run(run, ["ray", "stop"], container=False)
    assert "Stopped all 1 Ray processes." in stop.stdout
    gone = cluster.run(run, ["ray", "status"], container=False)
    assert gone.returncode == 1 and "Could not find any running Ray instance" in gone.stderr


def test_ray_stop_in_the_head_container_ends_its_block(cluster, tmp_path):
    run = make_node(tmp_path, "node0", gpu="b200")
    head = cluster.start(run, ["ray", "start", "--head", f"--port={free_port()}", "--block"],
                         image=VLLM_IMAGE)
    wait_for_line(head, "This command will now block forever")
    assert cluster.run(run, ["ray", "status"], exec_in=head.config).returncode == 0
    stop = cluster.run(run, ["ray", "stop"], exec_in=head.config)
    assert "Stopped all 1 Ray processes." in stop.stdout
    assert wait_exit(head, 10) == 0


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


# ---- the real engines' option tables (k3deploy/engines/cli_tables) -----------------------------
import clitable  # noqa: E402
import sglang as sglang_standin  # noqa: E402

from k3deploy.engines import cli_contract  # noqa: E402


def test_an_unknown_flag_fails_with_the_real_parsers_wording(cluster, tmp_path):
    # The real parsers' lines for these argvs (sglang 0.5.23, vllm 0.33.0; ray: click 8.1).
    run = make_node(tmp_path, "node0")
    sgl = cluster.run(run, ["sglang", "serve", "--model-path", "moonshotai/Kimi-K3",
                            "--tp-szie", "8"])
    assert sgl.returncode == 2 and sgl.stderr.startswith("usage: sglang serve [-h]")
    assert "sglang serve: error: unrecognized arguments: --tp-szie 8" in sgl.stderr
    vllm = cluster.run(run, ["vllm", "serve", "moonshotai/Kimi-K3", "--bogus"], image=VLLM_IMAGE)
    assert vllm.returncode == 2
    assert "vllm serve: error: unrecognized arguments: --bogus" in vllm.stderr
    ray = cluster.run(run, ["ray", "start", "--head", "--blok"], image=VLLM_IMAGE)
    assert ray.returncode == 2 and "Error: No such option: --blok Did you mean --block?" in ray.stderr


def test_an_underscored_sglang_config_key_is_refused_like_its_config_merger(cluster, tmp_path):
    run = make_node(tmp_path, "node0")
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "engine.yaml").write_text("api_key: sk-test-key\n")
    result = cluster.run(run, sglang_cmd(free_port(), "--config", "/etc/k3/engine.yaml"),
                         mounts=[{"host": str(conf), "container": "/etc/k3", "ro": True}])
    assert result.returncode == 2 and "unrecognized arguments: --api_key sk-test-key" in result.stderr


def test_the_deprecated_dp_attention_flag_warns_and_its_replacement_works(capsys):
    parser = sglang_standin.build_parser("sglang serve")
    old = parser.parse_args(["--model-path", "m", "--tp", "8", "--enable-dp-attention",
                             "--dp", "8"])
    assert "Use '--attn-dp-size <dp-size>' instead." in capsys.readouterr().err
    new = parser.parse_args(["--model-path", "m", "--tp-size", "8", "--attn-dp-size", "8"])
    assert capsys.readouterr().err == ""
    for args in (old, new):
        assert sglang_standin.gpus_needed(args) == 8 and sglang_standin.attn_dp_size(args) == 8


@pytest.mark.parametrize("engine,argv", [
    ("sglang", ["--model-path", "m", "--tp-szie", "8"]),
    ("sglang", ["--model-path", "m", "--tp", "8", "--dp", "8", "--enable-metrics"]),
    ("sglang", ["--model-path", "m", "--cuda-graph-max-bs", "8"]),
    ("sglang", ["--model-path", "m", "--moe-runner-backend", "nope"]),
    ("sglang", ["--model-path", "m", "--trust-remote-code=1"]),
    ("vllm", ["m", "--data_parallel_size", "8", "--kv-cache-dtype", "fp8"]),
    ("vllm", ["m", "--data-parallel-si", "8"]),
    ("vllm", ["m", "--served-model-name"]),
    ("vllm", ["m", "--no-enable-expert-parallel", "--max-model-len", "128k"]),
    ("ray", ["--head", "--block", "--port=6379"]),
    ("ray", ["--head", "--num-gpus", "eight"]),
    ("ray", ["--head", "--log-style", "fancy"]),
])
def test_stand_in_parsers_and_the_launch_checker_agree(engine, argv, capsys):
    """Both read the same tables: the stand-in (argparse built from them) fails exactly
    when k3deploy's checker reports an error."""
    kind = clitable.ClickStyleParser if engine == "ray" else None
    parser = clitable.build(engine, **({"parser_class": kind} if kind else {}))
    try:
        parser.parse_args(clitable.normalise(parser.table, argv))
        rejected = False
    except SystemExit as stop:
        rejected = stop.code == 2
    capsys.readouterr()
    checked = [f for f in cli_contract.check_argv(engine, argv) if f.level == "error"]
    assert rejected == bool(checked), checked

"""The single-node B300 (vLLM and SGLang) and 2x8 B200 vLLM-over-Ray bring-ups on the testbed:
`k3deploy up` reaches a verified endpoint, running it again changes nothing, `k3deploy down`
leaves no container on any node (Ray workers included). Needs root (the testbed)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml

from k3deploy.cluster import inventory
from k3deploy.node.apikey import key_path
from k3deploy.core.state import state_dir_for
from k3deploy.remote.protocol import WorkPaths
from k3run import CLI_TIMEOUT, bounded_run
from tbfixture import set_engine, testbed

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="the testbed needs root")]

REPO = Path(__file__).resolve().parents[2]
BRINGUP = ["preflight", "nvme", "download-start", "image", "download", "ray-cluster", "launch",
           "wait", "verify"]
STARTS = (("docker", "run"), ("docker", "exec", "-d"))   # what would (re)start an engine


def k3deploy(*args: str, timeout: float = CLI_TIMEOUT) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    return bounded_run([sys.executable, "-m", "k3deploy", *args], timeout, cwd=REPO, env=env)


def ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def step_statuses(inv) -> dict[str, dict[str, str]]:
    state = state_dir_for(inv.source, inv.cluster, None)
    return {n.name: {k: v["status"] for k, v in
                     json.loads((state / f"{n.name}.json").read_text())["steps"].items()}
            for n in inv.nodes}


def engine_starts(tb) -> int:
    calls = [c["argv"] for node in tb.stats()["nodes"].values() for c in node["calls"]]
    return sum(1 for argv in calls if any(tuple(argv[:len(s)]) == s for s in STARTS))


def chat_from_laptop(inv) -> dict:
    """Straight to the head's serve port over the testbed bridge: proves it listens on
    0.0.0.0 (SGLang's and vLLM's stand-ins, like upstream, would otherwise keep 127.0.0.1)."""
    key = key_path(state_dir_for(inv.source, inv.cluster, None)).read_text().strip()
    body = {"model": inv.model.repo, "reasoning_effort": "low",
            "messages": [{"role": "user", "content": "Hello"}]}
    req = urllib.request.Request(f"http://{inv.head.address}:{inv.ports.serve}/v1/chat/completions",
                                 data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json",
                                          "Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())["choices"][0]["message"]


def containers_left(tb) -> dict[str, str]:
    out = {}
    for name in tb.nodes:
        res = tb.ssh(name, "docker ps -a --format '{{.Names}} {{.Status}}'")
        assert res.returncode == 0, res.stderr
        if res.stdout.strip():
            out[name] = res.stdout.strip()
    return out


def bring_up_verify_tear_down(tb) -> tuple[object, dict[str, dict[str, str]]]:
    inv = inventory.load(tb.inventory)
    ok(k3deploy("up", "-i", str(tb.inventory)))
    first = step_statuses(inv)
    assert all(per["verify"] == "ok" for per in first.values()), first
    message = chat_from_laptop(inv)
    assert message["content"] and (message.get("reasoning_content") or message.get("reasoning"))

    starts = engine_starts(tb)
    ok(k3deploy("up", "-i", str(tb.inventory)))
    again = step_statuses(inv)
    assert {s for per in again.values() for k, s in per.items() if k in BRINGUP} == {"ok"}, again
    assert engine_starts(tb) == starts

    ok(k3deploy("down", "-i", str(tb.inventory)))
    assert containers_left(tb) == {}
    return inv, first


def test_b300_vllm_single_node(tmp_path):
    with testbed(tmp_path, nodes=1, gpu="b300", gpus_per_node=8, engine="vllm") as tb:
        # The guide's optional long-context and vision flags, through engine.args.
        doc = yaml.safe_load(tb.inventory.read_text())
        doc["engine"]["args"] = {"enable-chunked-prefill": True, "max-num-batched-tokens": 8192,
                                 "mm-encoder-tp-mode": "data"}
        tb.inventory.write_text(yaml.safe_dump(doc))
        inv, first = bring_up_verify_tear_down(tb)
        assert first["node0"]["ray-cluster"] == "ok"          # no Ray on one node
        runs = [c["argv"] for c in tb.stats()["nodes"]["node0"]["calls"]
                if c["argv"][:2] == ["docker", "run"]]
        argv = runs[0]
        assert argv[argv.index("--max-model-len") + 1] == str(inv.engine.context_length)
        assert argv[argv.index("--data-parallel-size") + 1] == "8"
        assert "--enable-auto-tool-choice" in argv and "--data-parallel-backend" not in argv
        assert "--enable-chunked-prefill" in argv
        assert argv[argv.index("--mm-encoder-tp-mode") + 1] == "data"


def test_b300_sglang_single_node(tmp_path):
    with testbed(tmp_path, nodes=1, gpu="b300", gpus_per_node=8, engine="sglang") as tb:
        _, first = bring_up_verify_tear_down(tb)
        runs = [c["argv"] for c in tb.stats()["nodes"]["node0"]["calls"]
                if c["argv"][:2] == ["docker", "run"]]
        argv = runs[0]
        assert "--enable-dp-attention" in argv and argv[argv.index("--dp") + 1] == "8"
        assert argv[argv.index("--host") + 1] == "0.0.0.0"


def test_b200_two_nodes_vllm_over_ray(tmp_path):
    with testbed(tmp_path, nodes=2, gpu="b200", gpus_per_node=8, engine="vllm",
                 overrides={"node1": {"engine_fault": "oom"}}) as tb:
        set_engine(tb, executor="ray")
        # The dry-fire's Ray group meets the worker's KV cache fault before any weight is read.
        failed = k3deploy("up", "-i", str(tb.inventory))
        out = " ".join((failed.stdout + failed.stderr).split())   # as one line, unwrapped
        assert failed.returncode == 1 and "dry-fire (dummy weights)" in out, out
        # Named at the launch's own look when the rank has died by then, else at the wait's.
        assert re.search(r"\[node1/dry-fire-(launch|wait)\]", out) and "failing ranks ran on node1" in out, out
        assert "No available memory for the cache blocks" in out, out
        tb.fault("engine-fault", "node1", "none")
        inv, first = bring_up_verify_tear_down(tb)
        assert first["node0"]["ray-cluster"] == first["node1"]["ray-cluster"] == "changed"
        # The detached serve's output (docker logs holds only `ray start`'s): saved by down.
        logs = state_dir_for(inv.source, inv.cluster, None) / "logs"
        (serve_log,) = logs.glob("*/node0-rank0-serve.log")
        text = serve_log.read_text()
        assert "Starting vLLM server on" in text and "Loading safetensors checkpoint shards" in text
        assert not list(logs.glob("*/node1-*-serve.log"))
        assert first["node1"]["launch"] == "ok"                  # workers run nothing more
        calls = {n: [c["argv"] for c in per["calls"]] for n, per in tb.stats()["nodes"].items()}
        serves = [a for a in calls["node0"] if a[:3] == ["docker", "exec", "-d"]]
        # The dry-fire's serves (dummy weights, in their own Ray cluster: the one the fault
        # stopped, the one that passed), then the real one.
        assert all(a[8:10] == ["vllm", "serve"] for a in serves), serves
        assert [" ".join(a).count("--load-format dummy") for a in serves] == [1, 1, 0]
        assert {per["dry-fire"] for per in first.values()} == {"changed"}
        assert {per["dry-fire-stop"] for per in first.values()} == {"changed"}
        for node in tb.nodes:   # each rank's report, taken while the whole group still ran
            report = json.loads(tb.ssh(node, f"cat {WorkPaths(inv.paths.work).work}/dry-fire/"
                                             "*.json").stdout)
            assert len(report["gpu_used_mib"]) == 8 and min(report["gpu_used_mib"]) > 0, report
        assert not [a for a in calls["node1"] if a[:3] == ["docker", "exec", "-d"]]
        head_run = next(a for a in calls["node0"] if a[:2] == ["docker", "run"])
        worker_run = next(a for a in calls["node1"] if a[:2] == ["docker", "run"])
        assert "--head" in head_run and any(t.startswith("--address=") for t in worker_run)


def test_h200_four_nodes_sglang(tmp_path):
    with testbed(tmp_path, nodes=4, gpu="h200", gpus_per_node=8, engine="sglang") as tb:
        _, first = bring_up_verify_tear_down(tb)
        argv = next(c["argv"] for c in tb.stats()["nodes"]["node3"]["calls"]
                    if c["argv"][:2] == ["docker", "run"])
        assert argv[argv.index("--tp-size") + 1] == "32"
        assert argv[argv.index("--node-rank") + 1] == "3"
        assert argv[argv.index("--moe-runner-backend") + 1] == "marlin"

"""The vLLM stand-in across two nodes with the multiprocessing executor (no Ray), on loopback:
the API node serves only once the --headless node's engine cores joined and loaded; it waits
for them with no deadline and no line at INFO (vllm/v1/engine/utils.py wait_for_engine_startup);
every forward step needs both nodes; a headless node that dies leaves the API node's ranks in
their next collective until the torch timeout, or ends them at once with on_peer_loss abort
(scripts/tb/standins/engine/vllm_mp.py). No root needed (fixtures in standin_procs.py)."""
import json
import os
import signal
import time

import pytest
from standin_procs import (CHAT, VLLM_IMAGE, free_port, gpu_report, health_or_none, http, log_of,
                           make_node, vllm_cmd, wait_exit, wait_for_line, wait_health)

from k3deploy.engines import startup_log


def node_cmd(port, rpc, *extra):
    return vllm_cmd(port, 16, "--data-parallel-size-local", "8", "--data-parallel-address",
                    "127.0.0.1", "--data-parallel-rpc-port", str(rpc),
                    "--distributed-timeout-seconds", "6", *extra)


def headless_cmd(rpc):
    return node_cmd(free_port(), rpc, "--data-parallel-start-rank", "8", "--headless")


def test_the_api_node_serves_once_the_headless_node_joined_then_its_loss_hangs_it(cluster,
                                                                                 tmp_path):
    api_run, other_run = (make_node(tmp_path, f"node{i}", gpu="b200") for i in (0, 1))
    port, rpc = free_port(), free_port()
    api = cluster.start(api_run, node_cmd(port, rpc), image=VLLM_IMAGE)
    wait_for_line(api, "] Started DP Coordinator process (PID: ")
    assert startup_log.started("vllm", log_of(api))
    time.sleep(2)   # alone it loads nothing and serves nothing, and says nothing more
    assert api.poll() is None and health_or_none(port) is None
    assert "Starting to load model" not in log_of(api)
    headless = cluster.start(other_run, headless_cmd(rpc), image=VLLM_IMAGE)
    wait_health(port, api)
    said = log_of(headless)
    assert ("Launching 8 data parallel engine(s) in headless mode, with head node address "
            f"tcp://127.0.0.1:{rpc}.") in said and startup_log.started("vllm", said)
    assert "(EngineCore_DP8 pid=" in said and "Loading safetensors" not in said
    assert all(len(gpu_report(r)["used_mib"]) == 8 for r in (api_run, other_run))
    status, reply = http(port, "/v1/chat/completions", CHAT)
    assert status == 200 and reply["choices"][0]["message"]["reasoning_content"]
    os.killpg(headless.pid, signal.SIGKILL)
    lost = time.monotonic()
    # vLLM's engine monitor watches only the API node's own engine cores: nothing ends there
    # until the collective times out (--distributed-timeout-seconds 6).
    time.sleep(2)
    assert api.poll() is None
    assert wait_exit(api, 20) == 1 and time.monotonic() - lost >= 5
    assert "Watchdog caught collective operation timeout" in log_of(api)


def test_on_peer_loss_abort_ends_the_api_node_at_once(cluster, tmp_path):
    faults = {"on_peer_loss": "abort"}
    api_run, other_run = (make_node(tmp_path, f"node{i}", gpu="b200", faults=faults)
                          for i in (0, 1))
    port, rpc = free_port(), free_port()
    headless = cluster.start(other_run, headless_cmd(rpc), image=VLLM_IMAGE)   # retries
    api = cluster.start(api_run, node_cmd(port, rpc), image=VLLM_IMAGE)
    wait_health(port, api)
    os.killpg(headless.pid, signal.SIGKILL)
    assert wait_exit(api, 10) == 1 and "NCCL communicator was aborted" in log_of(api)


@pytest.mark.parametrize("extra,said", [
    (("--headless", "--data-parallel-size-local", "0"),
     "data_parallel_size_local must be > 0 in headless mode"),
    (("--data-parallel-size-local", "4"), "= 4 ranks on this node, but it has 8 GPUs"),
])
def test_a_node_whose_ranks_do_not_fit_exits_naming_it(cluster, tmp_path, extra, said):
    run = make_node(tmp_path, "node0", gpu="b200")
    cmd = vllm_cmd(free_port(), 16, "--data-parallel-address", "127.0.0.1", *extra)
    result = cluster.run(run, cmd, image=VLLM_IMAGE)
    assert result.returncode == 1 and said in result.stderr + result.stdout


def _scaled(run, scale):
    node = json.loads((run / "node.json").read_text())
    (run / "node.json").write_text(json.dumps({**node, "watchdog_time_scale": scale}))
    return run


# A K3 load of ~40 minutes (vllm-project/vllm#38476) against vLLM's 600 s default is 4x the
# timeout; with the 3600 s vLLM's K3 recipe (and k3deploy, engines/docker.py) sets, 0.67x.
# Here: every node loads 4 s on a clock scaled 1/600, so 600 s reads as 1 s and 3600 s as 6 s.
LOAD, SCALE = 4.0, 1 / 600


@pytest.mark.parametrize("ready_timeout", [None, "3600"])
def test_the_api_node_gives_its_engine_cores_vllm_engine_ready_timeout_s(cluster, tmp_path,
                                                                        ready_timeout):
    env = {"VLLM_ENGINE_READY_TIMEOUT_S": ready_timeout} if ready_timeout else {}
    api_run, other_run = (_scaled(make_node(tmp_path, f"node{i}", gpu="b200", load=LOAD), SCALE)
                          for i in (0, 1))
    port, rpc = free_port(), free_port()
    cluster.start(other_run, headless_cmd(rpc), image=VLLM_IMAGE, env=env)
    api = cluster.start(api_run, node_cmd(port, rpc), image=VLLM_IMAGE, env=env)
    if ready_timeout:
        wait_health(port, api)
        assert "Timed out waiting" not in log_of(api)
        return
    assert wait_exit(api, 30) == 1
    said = log_of(api)
    assert ("TimeoutError: Timed out waiting for engine core processes to start. This is often "
            "caused by slow weight loading for large models. Waited 600s (configured by "
            "VLLM_ENGINE_READY_TIMEOUT_S).") in said, said[-1500:]
    assert "Application startup complete" not in said

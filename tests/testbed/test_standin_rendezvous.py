"""The stand-in engines' multi-node rendezvous on loopback: four ranks form a group and rank 0
serves; a lost rank, a short shard, a duplicate rank or an IPv6 init address hang or fail the
group as real torch.distributed does. No root needed (fixtures in standin_procs.py)."""
import json
import os
import signal
import time
import urllib.request

import pytest
from polling import wait_until
from standin_procs import (CHAT, free_port, gpu_report, health_or_none, http, log_of,
                           make_hf_cache, make_node, sglang_cmd, shard_name, wait_exit,
                           wait_health)


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
    # Each on a port of its own: here all "nodes" share one loopback, and a worker serves
    # SGLang's dummy health server on its --port once loaded (engine.py).
    procs = [cluster.start(runs[r], four_node_cmd(free_port(), dist, r, timeout))
             for r in (3, 1, 2)]
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
    # 8 s: all four processes must reach the store within the timeout for the doubled rank's
    # NCCL timeout to show (3 s was too short for four starts on a loaded 2-core CI machine).
    procs = [cluster.start(run, four_node_cmd(http_port, dist, rank, timeout=8),
                           env={"SGLANG_HOST_IP": ip} if ip else {})
             for run, (rank, ip, http_port) in zip(runs, ranks)]
    # Rank 0's port stays closed: SGLang starts its HTTP server only once every scheduler is
    # ready (engine.py), and without a group none is (every rank's barrier timeout below
    # proves it never formed).
    assert wait_until(lambda: "Waiting in store based barrier" in log_of(procs[0]), 20,
                      "rank 0 at the barrier")
    assert health_or_none(port) is None
    for proc in procs:
        assert wait_exit(proc, 20) == 1
        log = log_of(proc)
        assert "Waiting in store based barrier" in log
        assert "world_size=32" in log      # torch counts one process per GPU: 4 nodes x 8
        assert ("DistStoreError: Timed out after 9 seconds waiting for clients" in log
                if mistake == "two ranks 0" else "ran for 8001 milliseconds" in log), log[-600:]
        assert "loading shards" not in log and "checkpoint shards" not in log
    assert not any((run / "gpu.json").exists() for run in runs)


def test_ipv6_dist_init_addr_hangs_until_the_timeout(cluster, tmp_path):
    run = make_node(tmp_path, "node1", gpus=4)
    cmd = sglang_cmd(free_port(), "--nnodes", "2", "--node-rank", "1", "--dist-init-addr",
                     f"[::1]:{free_port()}", "--dist-timeout", "2", tp=8)
    started = time.monotonic()
    result = cluster.run(run, cmd)
    assert result.returncode == 1 and time.monotonic() - started >= 2
    assert "DistNetworkError: The client socket has timed out after 2000ms" in result.stderr

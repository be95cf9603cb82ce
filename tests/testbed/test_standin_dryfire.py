"""The stand-in SGLang's `--load-format dummy` and its start-up faults (engine_fault): what a
dry-fire launch meets (standins/engine/startfaults.py, weights.py load_dummy).

Same harness as test_standin_engines.py: a temp K3TB_RUN per node, engine processes on
loopback, every one killed when the test ends.
"""
import pytest
from standin_procs import (GPUS, SHARDS, free_port, gpu_report, log_of, make_node, shard_name,
                           sglang_cmd, wait_exit, wait_health)


def test_dummy_serves_without_any_weight_file_at_the_real_memory(cluster, tmp_path):
    for i in range(1, SHARDS + 1):   # the download has not reached one shard yet
        (cluster.snapshot / shard_name(i)).unlink()
    run = make_node(tmp_path, "node0", load=30.0)   # a real load would take 30 s
    port = free_port()
    proc = cluster.start(run, sglang_cmd(port, "--mem-fraction-static", "0.85",
                                         "--load-format", "dummy"))
    wait_health(port, proc, timeout=15)
    used = gpu_report(run)["used_mib"]
    assert used == [int(0.85 * GPUS["b300"][1]) + 1638] * 8
    assert "Load weight end." in log_of(proc) and "Multi-thread loading" not in log_of(proc)


def test_load_format_takes_only_upstream_values(cluster, tmp_path):
    result = cluster.run(make_node(tmp_path, "node0"),
                         sglang_cmd(free_port(), "--load-format", "random"))
    assert result.returncode == 2
    assert "argument --load-format: invalid choice: 'random'" in result.stderr


def test_parser_fault_is_argparse_rejecting_the_models_parser(cluster, tmp_path):
    run = make_node(tmp_path, "node0", faults={"engine_fault": "parser"})
    result = cluster.run(run, sglang_cmd(free_port(), "--reasoning-parser", "kimi_k3"))
    assert result.returncode == 2
    assert "error: argument --reasoning-parser: invalid choice: 'kimi_k3'" in result.stderr
    lifted = make_node(tmp_path, "node1", faults={"engine_fault": "none"})
    proc = cluster.start(lifted, sglang_cmd(port := free_port(), "--reasoning-parser", "kimi_k3",
                                            "--load-format", "dummy"))
    wait_health(port, proc)


@pytest.mark.parametrize("kind,line", [
    ("oom", "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            "Current value: mem_fraction_static=0.85"),
    ("nccl", "torch.distributed.DistBackendError: NCCL error in: "),
])
def test_start_faults_kill_the_launcher_as_sglang_does(cluster, tmp_path, kind, line):
    run = make_node(tmp_path, "node0", faults={"engine_fault": kind})
    proc = cluster.start(run, sglang_cmd(free_port(), "--mem-fraction-static", "0.85",
                                         "--load-format", "dummy"))
    assert wait_exit(proc, 15) == 137
    log = log_of(proc)
    assert line in log
    assert "Scheduler hit an exception: Traceback (most recent call last)" in log
    assert log.rstrip().endswith("Received sigquit from a child process. It usually means the "
                                 "child failed.")
    if kind == "nccl":
        assert "misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to" in log
        assert "Load weight begin" not in log
    else:
        assert "Load weight end." in log and "KV Cache is allocated" not in log

"""The stand-in SGLang's weight load as a real rank's looks from outside (standins/engine/
diskread.py, sglang.py fill_gpu_memory): GPU memory full from `Load weight begin.` and flat
through the load; the shards read and the CPU busy, so that k3deploy's probe of the engine's
processes (facts/engine_usage.py) sees its counters move.

Same harness as test_standin_engines.py: a temp K3TB_RUN per node, engine processes on
loopback, every one killed when the test ends.
"""
import os
import subprocess
import time

from standin_procs import (GPUS, free_port, gpu_report, log_of, make_node, sglang_cmd,
                           wait_for_line)

from k3deploy.facts.engine_usage import usage_probe

LOAD = 4.0


def probe(tmp_path, pid):
    """The wait's probe on this machine, `docker inspect` answering with the engine's PID."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "docker").write_text(f"#!/bin/sh\necho {pid}\n")
    (bin_dir / "docker").chmod(0o755)
    found = usage_probe("k3")
    out = subprocess.run(["sh", "-c", found.script], capture_output=True, text=True,
                         env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    return found.parse(out.stdout, out.returncode)


def test_the_load_reads_and_runs_while_gpu_memory_stands_still(cluster, tmp_path):
    run = make_node(tmp_path, "node0", load=LOAD)
    proc = cluster.start(run, sglang_cmd(free_port(), "--mem-fraction-static", "0.85"))
    wait_for_line(proc, "Load weight begin.")
    samples = []
    while "Load weight end." not in log_of(proc) and proc.poll() is None:
        samples.append((gpu_report(run)["used_mib"], probe(tmp_path, proc.pid)))
        time.sleep(0.4)
    assert proc.poll() is None, log_of(proc)
    during = samples[1:]          # the first look may come just before the allocation
    assert len(during) >= LOAD / 0.4 / 2, len(during)
    memory = {tuple(m) for m, _ in during}
    weights_mib = 1560.94 / 8 + 10.82   # GB per GPU of K3 on one 8-GPU node, in MiB below
    assert memory == {(1638 + int(weights_mib * 1000 / 1.048576),) * 8}, memory
    assert max(memory)[0] < 0.85 * GPUS["b300"][1]   # not yet the KV pool
    usages = [u for _, u in during]
    assert all(u is not None and u.processes[0].pid == proc.pid for u in usages)
    shards = sum(p.stat().st_size for p in cluster.snapshot.glob("*.safetensors"))
    assert usages[-1].bytes_read - usages[0].bytes_read >= shards * 0.5
    moved = sum(later.moved_since(earlier) for earlier, later in zip(usages, usages[1:]))
    assert moved >= len(usages) - 2, [(u.cpu_seconds, u.bytes_read) for u in usages]
    assert len({u.cpu_seconds for u in usages}) >= 3

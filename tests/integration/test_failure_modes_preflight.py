"""Failure modes found before anything changes, each on a 4-node testbed of its own: CUDA 12
drivers on every node (the cu12 image, not a refusal), and preflight's refusals (a node with 7
GPUs, one CUDA 12 node among CUDA 13 ones, too little disk) in one problems table."""

from __future__ import annotations

import re

import pytest
from failure_report import assert_nothing_changed, daemon_json, node_calls, problem_tables, run, said
from tbfixture import testbed

pytestmark = pytest.mark.integration


# -- 1. CUDA 12 ----------------------------------------------------------------------------

def test_cuda12_on_every_node_runs_the_cu12_image(tmp_path):
    with testbed(tmp_path, nodes=4, cuda="12.8") as tb:
        proc = run("up", "-i", str(tb.inventory))
        assert proc.returncode == 0, said(proc)
        assert "endpoint: http://" in said(proc)
        for node, calls in node_calls(tb).items():
            images = {a[-1] for a in calls if a[:2] == ["docker", "pull"]}
            images |= {a[a.index("sglang") - 1] for a in calls if a[:2] == ["docker", "run"]}
            assert images == {"lmsysorg/sglang:kimi-k3-cu12"}, (node, images)


# -- 2. preflight refusals: one CUDA 12 node among CUDA 13 ones, a node with 7 GPUs, too little
# disk. All three at once, as a real cluster can have them: one run must name each problem in
# its one problems table, and change nothing anywhere.

def test_every_preflight_problem_is_in_one_table_and_nothing_changes(tmp_path):
    faults = {"node1": {"gpus": 7}, "node2": {"cuda": "12.8"}, "node3": {"disk": "20M"}}
    with testbed(tmp_path, nodes=4, overrides=faults) as tb:
        before = {n: daemon_json(tb, n) for n in tb.nodes}
        proc = run("up", "-i", str(tb.inventory))
        assert proc.returncode == 1, said(proc)
        (table,) = problem_tables(said(proc))  # one table, not one per node or per check
        assert sorted((n, c) for n, c, _ in table) == \
            [("node1", "gpus"), ("node2", "identical"), ("node3", "disk")], said(proc)
        message = {n: m for n, _, m in table}
        assert "7 GPUs, the inventory expects 8" in message["node1"]
        assert "replace the node" in message["node1"]  # what to do
        assert "CUDA 12.8 differs" in message["node2"] and "CUDA 13.0" in message["node2"]
        assert "install the others' driver (CUDA 13.0)" in message["node2"]
        found = re.search(r"([\d.]+) GB free on /mnt/nvme .* < ([\d.]+) GB needed", message["node3"])
        assert found, message["node3"]
        free, need = map(float, found.groups())
        assert free == pytest.approx(0.02, abs=0.006) and need > free
        assert "mount a larger NVMe" in message["node3"]
        assert "3 problem(s) found; nothing was changed" in said(proc)
        assert "failed node1/preflight" in said(proc) and "failed node3/preflight" in said(proc)

        assert_nothing_changed(tb, before)
        # The run's first look asks every step's read-only questions at once; nothing else ran.
        reads = (["docker", "info"], ["docker", "image", "inspect"], ["docker", "inspect"],
                 ["docker", "logs"], ["nvidia-smi", "-q"], ["nvidia-smi", "topo", "-m"],
                 ["systemctl", "cat"])
        calls = [a for found in node_calls(tb).values() for a in found]
        assert calls and all(any(a[:len(r)] == r for r in reads) for a in calls), calls

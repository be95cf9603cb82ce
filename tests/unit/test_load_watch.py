"""The endpoint wait through a weight load that shows only in the ranks' CPU time and reads
(steps/engine/load_watch.py, facts/engine_usage.py): GPU memory flat from the load's start, no
bar until it closes, silent workers; a rank whose processes stand still is named."""

from __future__ import annotations

from dataclasses import replace

import pytest

from k3deploy.cluster import inventory
from k3deploy.core.errors import StepFailed
from k3deploy.facts.engine_usage import EngineUsage, ProcessUsage
from k3deploy.node.context import RunContext
from k3deploy.run.runner import Runner
from k3deploy.steps.engine.wait import WaitHealthy
from tests.unit.fakes import FakeSession
from tests.unit.invdata import four_nodes
from tests.unit.test_observe_and_wait import gpus, ranks_waiting

FORMED = "[2026-05-28 05:56:09 TP0] Init torch distributed ends. mem usage=0.55 GB\n"
BEGIN = "[2026-05-28 05:56:09 TP{r}] Load weight begin. avail mem=78.21 GB\n"
END = ("[2026-05-28 06:26:09 TP{r}] Load weight end. type=KimiK3ForConditionalGeneration, "
       "dtype=torch.bfloat16, avail mem=18.61 GB, mem usage=59.60 GB.\n")


def usage(cpu_ticks: int, read: int, pid: int = 4242) -> EngineUsage:
    """A rank's container: its main process and one scheduler (the one that reads)."""
    return EngineUsage(100, (ProcessUsage(pid, 9000, 310, 0, 2_000_000),
                             ProcessUsage(pid + 1, 9050, cpu_ticks, read, 0)))


def loading(tmp_path, stall=10.0):
    """Four ranks formed and in their loads: every rank logged `Load weight begin.`, its GPU
    memory full from then on (the model is built before the first shard is read)."""
    inv = inventory.parse(four_nodes())
    run = RunContext(inv=inv, session=FakeSession(inv, tmp_path))
    step = WaitHealthy({"form_timeout": 5, "stall_seconds": stall})
    step.prepare(run)
    seen = ranks_waiting(gpus=gpus(8 * 61_000))
    for i in range(4):
        seen[f"node{i}"] = replace(seen[f"node{i}"], log=(FORMED if i == 0 else "") +
                                   BEGIN.format(r=8 * i))
    return run, step, seen


def look(step, run, seen, t, frozen=None, rate=400_000_000):
    """One poll at time t: every rank read `rate` bytes/s and ran a core since 0, each frozen
    one ({node: time}) only until it froze."""
    for i in range(4):
        name = f"node{i}"
        n = min(t, (frozen or {}).get(name, t))
        seen[name] = replace(seen[name], usage=usage(100 * n, rate * n))
    step.check_cluster(seen, run, waited=float(t), looked_at=1000.0 + t)


def test_a_load_three_stall_limits_long_passes_on_cpu_and_reads_alone(tmp_path):
    run, step, seen = loading(tmp_path, stall=10)
    node0 = Runner(run, [step]).contexts[0]
    marks = set()
    for t in range(0, 31, 2):      # 30 s: three stall limits, no line, memory flat
        look(step, run, seen, t)
        marks.add(step.progress(seen["node0"], node0))
    assert len(marks) == 16        # every poll moved


def test_the_wait_fails_when_a_load_stands_still_everywhere(tmp_path):
    """The counters standing still on every rank: no progress for the runner's stall limit."""
    run, step, seen = loading(tmp_path, stall=10)
    node0 = Runner(run, [step]).contexts[0]
    look(step, run, seen, 0)
    look(step, run, seen, 2)
    first = step.progress(seen["node0"], node0)
    for t in (4, 6):
        step.check_cluster(seen, run, waited=float(t), looked_at=1000.0 + t)   # same counters
        assert step.progress(seen["node0"], node0) == first


def test_a_rank_stopped_mid_load_is_named_within_the_stall_limit(tmp_path):
    run, step, seen = loading(tmp_path, stall=10)
    for t in range(0, 19, 2):                # SIGSTOP at t=8: its counters freeze
        look(step, run, seen, t, frozen={"node2": 8})
    with pytest.raises(StepFailed) as err:
        look(step, run, seen, 20, frozen={"node2": 8})
    assert err.value.node == "node2"
    assert "rank 2 is stuck in its weight load" in str(err.value)
    assert "used no CPU and read nothing for 12s" in str(err.value)
    assert "docker top k3" in err.value.hint


def test_a_rank_done_loading_may_idle_and_an_unreadable_one_is_not_judged_alone(tmp_path):
    """Waiting for the slower ranks after its own `Load weight end.` is no stall; nor is a rank
    whose counters could not be read (the cluster-wide stall still covers it)."""
    run, step, seen = loading(tmp_path, stall=10)
    seen["node1"] = replace(seen["node1"], log=BEGIN.format(r=8) + END.format(r=8))
    for t in range(0, 31, 2):
        look(step, run, seen, t, frozen={"node1": 0})
        seen["node3"] = replace(seen["node3"], usage=None)
        step.check_cluster(seen, run, waited=float(t), looked_at=1000.0 + t)


def test_the_user_sees_each_rank_read_and_run(tmp_path):
    run, step, seen = loading(tmp_path, stall=10)     # a line at most every stall / 5 = 2 s
    views = []
    for t in range(0, 7):
        look(step, run, seen, t)
        views.append(step._view)
    assert views[0].startswith("engine processes: rank 0 read 2.0 MB; rank 1 read 2.0 MB")
    assert views[1] == views[0]             # under 2 s since the last: the same line
    assert views[2] == ("engine processes: " + "; ".join(
        f"rank {r} read 0.80 GB (400 MB/s), CPU 1.00 cores busy" for r in range(4)))
    assert len(set(views)) == 4


def test_counters_move_by_process_not_by_sum():
    before = usage(100, 10)
    assert usage(101, 10).moved_since(before) and usage(100, 11).moved_since(before)
    assert not usage(100, 10).moved_since(before) and not usage(500, 500).moved_since(None)
    gone = EngineUsage(100, before.processes[:1])      # a process ended: the sum fell
    assert not gone.moved_since(before)
    assert usage(100, 10, pid=5000).moved_since(before)   # new processes started
    assert before.cpu_seconds == 4.1 and before.bytes_read == 2_000_000 + 10

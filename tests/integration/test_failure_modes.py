"""The guide's failure modes on a 4x8 H100 testbed, each as the user meets it: `k3deploy` run as
a subprocess; the exit code and what it prints must name the node, the step or check, and
what to do. Every test leaves its cluster as it found it (or has its own).

This module's tests share one healthy cluster (the module-scoped `cluster` fixture); the failure
modes that need a testbed of their own are in test_failure_modes_*.py, the helpers reading the
output in failure_report.py."""

from __future__ import annotations

import re
import shlex
import time

import pytest
from failure_report import node_calls, problem_rows, run, said, set_fault, summary
from tbfixture import testbed

from k3run import changing_calls

from k3deploy.engines.dry_fire import DRY_FIRE_LABEL

pytestmark = pytest.mark.integration


# -- a shared, healthy cluster: weights and image on every node, no container running --------

@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with testbed(tmp_path_factory.mktemp("shared"), nodes=4) as tb:
        first = run("up", "-i", str(tb.inventory))
        assert first.returncode == 0, said(first)
        down = run("down", "-i", str(tb.inventory))
        assert down.returncode == 0, said(down)
        yield tb


@pytest.fixture
def shared(cluster):
    """The shared cluster; afterwards containers, faults and the inventory are as before."""
    inventory = cluster.inventory.read_text()
    yield cluster
    cluster.fault("heal", "node3", check=False)
    cluster.inventory.write_text(inventory)
    for node in cluster.nodes:
        set_fault(cluster, node, None)
    down = run("down", "-i", str(cluster.inventory))
    assert down.returncode == 0, said(down)


# -- 4. a partitioned node -------------------------------------------------------------------
# Exit 1, not 3: 3 promises "the reachable nodes were handled", but a bring-up cannot finish
# without every node, and preflight cannot vouch for a node it never saw (identical GPUs,
# disk, ports). So `up` stops at preflight and changes nothing anywhere; `down` keeps exit 3.

def test_partitioned_node_is_reported_quickly_and_nothing_changes(shared):
    tb = shared
    tb.fault("partition", "node3")
    calls_before = len(changing_calls(tb.stats()))
    started = time.monotonic()
    proc = run("up", "-i", str(tb.inventory), timeout=120)
    took = time.monotonic() - started
    # Quickly: by the 3 connect attempts (5 s connect timeout each), not by the kernel's SYN
    # retries (~130 s) or the 600 s command timeout; with room for a loaded machine.
    assert took < 100, took
    assert proc.returncode == 1, said(proc)
    text = said(proc)
    assert "unreachable node3" in text
    assert re.search(r"\[node3\] cannot reach root@[\d.]+:22 after 3 attempts", text), text
    assert "is the node up" in text
    rows = problem_rows(text)
    assert [(n, c) for n, c, _ in rows] == [("node3", "reachable")], text
    assert "bring it back or replace it" in rows[0][2]
    assert "not finished: node3 could not be reached" in text
    assert len(changing_calls(tb.stats())) == calls_before  # the other three untouched
    check = run("check", "-i", str(tb.inventory), timeout=120)
    assert check.returncode == 3, said(check)  # checked every node it reached: partial
    assert "unreachable node3" in said(check)


# -- 6. kimi_k2 reasoning parser carried over ------------------------------------------------

def test_kimi_k2_parser_is_caught_by_verify(shared):
    tb = shared
    text = tb.inventory.read_text()
    assert "  args: {}\n" in text
    tb.inventory.write_text(text.replace("  args: {}\n", "  args: {reasoning-parser: kimi_k2}\n"))
    proc = run("up", "-i", str(tb.inventory))
    assert proc.returncode == 1, said(proc)
    assert "failed node0/verify" in said(proc)
    rows = problem_rows(said(proc))
    assert [(n, c) for n, c, _ in rows] == [("node0", "reasoning")], said(proc)
    message = rows[0][2]
    assert "reasoning_content" in message and "kimi_k2" in message
    assert "engine.args.reasoning-parser: kimi_k2: set it to kimi_k3" in message
    assert "up --replace" in message
    assert "nothing was changed" not in said(proc)  # containers were launched


# -- 7. a rank that loads short --------------------------------------------------------------

def test_short_load_names_the_rank_and_its_memory(shared):
    tb = shared
    set_fault(tb, "node2", {"load_short": True})
    proc = run("up", "-i", str(tb.inventory))
    assert proc.returncode == 1, said(proc)
    assert "failed node2/verify" in said(proc)
    rows = problem_rows(said(proc))
    assert [(n, c) for n, c, _ in rows] == [("node2", "memory")], said(proc)
    found = re.search(r"rank 2, every GPU: ([\d.]+) GiB in use of ([\d.]+) GiB, expected "
                      r"~([\d.]+) GiB: this rank failed to load its shard", rows[0][2])
    assert found, rows[0][2]
    used, total, want = map(float, found.groups())
    assert used == pytest.approx(0.4 * want, rel=0.15) and total == pytest.approx(79.6, abs=0.1)
    assert "k3deploy logs -i" in rows[0][2]


# -- 9. a duplicate rank ---------------------------------------------------------------------
# The inventory validator refuses duplicate ranks, so the duplicate is made as a person would
# make it: node3's container replaced by hand with node1's rank, its k3deploy label copied
# (which also makes `launch` take it for its own).

def test_duplicate_rank_is_detected_instead_of_waiting(shared):
    tb = shared
    # The first launch is the shared fixture's, with the inventory as it is now.
    # The real launch's, not the dry-fire's (dummy weights, its own label).
    runs = [a for a in node_calls(tb)["node3"]
            if a[:2] == ["docker", "run"] and f"{DRY_FIRE_LABEL}=1" not in a]
    argv = list(runs[0])
    argv[argv.index("--node-rank") + 1] = "1"
    assert tb.ssh("node3", shlex.join(argv)).returncode == 0
    started = time.monotonic()
    proc = run("up", "-i", str(tb.inventory), timeout=200)
    took = time.monotonic() - started
    assert proc.returncode == 1, said(proc)
    # Room for a loaded machine, yet far below what a wait that missed the duplicate would sit
    # out: the form timeout (900 s), --dist-timeout (3600 s).
    assert took < 150, took
    text = said(proc)
    assert "[node3/wait] the process group can never form: node3 runs --node-rank 1, the " \
           "inventory gives it rank 3" in text, text
    assert "rank 1 on node1 and node3" in text and "rank 3 on no node" in text
    assert "on node3: docker rm -f k3" in text
    assert summary(text)["node3"]["wait"] == "failed"

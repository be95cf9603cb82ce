"""Dry-fire during the download (issue 32 item 4) on a 4-node testbed: node2's rank runs out
of memory at its KV pool (engine_fault=oom, standins/engine/startfaults.py), then refuses the
model's parser (engine_fault=parser: an image older than the model).

`up` fails (exit 1) naming node2 and SGLang's own line while the Hub has sent less than 60%
of the repo, and the detached download goes on. With the fault lifted, `up` again: the
dry-fire passes and seals the compile caches, the real launch mounts them and compiles
nothing. The Hub link is throttled so that the download lasts well over a minute (192 MB at
4 x 600 kB/s: ~80 s of Hub time, the peers fan the rest out), beside a dry-fire whose verdict
comes in under half of that (a quarter of the repo from the Hub by then, here).
"""

from __future__ import annotations

import time

import pytest
from failure_report import run, said
from tbfixture import testbed

pytestmark = pytest.mark.integration

SHARD_BYTES, NODE_RATE = 2_000_000, 600_000


def hub_share(tb) -> float:
    hub = tb.stats()["hub"]
    return sum(n["bytes"] for n in hub["by_node"].values()) / hub["repo_bytes"]


def engine_log(tb, node: str) -> str:
    return tb.ssh(node, "docker logs k3 2>&1").stdout


def test_an_oom_rank_fails_up_during_the_download_then_the_real_launch_compiles_nothing(
        tmp_path):
    with testbed(tmp_path, nodes=4, shard_bytes=SHARD_BYTES, hub_node_rate=NODE_RATE,
                 compile_seconds=3, overrides={"node2": {"engine_fault": "oom"}}) as tb:
        inv = str(tb.inventory)
        started = time.monotonic()
        failed = run("up", "-i", inv, timeout=400)
        verdict_s, share = time.monotonic() - started, hub_share(tb)
        out = said(failed)
        assert failed.returncode == 1, out
        # The last rank to start fails within a second of joining: launch's own start check
        # or the wait sees it exit, whichever looks first; both name it and its exit code.
        assert "[node2/dry-fire-" in out and "rank 2" in out and "(137)" in out, out
        assert ("RuntimeError: Not enough memory. Please try to increase "
                "--mem-fraction-static") in out, out
        assert share < 0.6, f"{share:.0%} of the repo left the Hub before the verdict"
        time.sleep(5)
        assert hub_share(tb) > share   # the detached download goes on

        # An image whose SGLang predates Kimi K3 refuses the model's parser at its argument
        # check: told by what that engine lists, with the image's own fix.
        tb.fault("engine-fault", "node2", "parser")
        refused = run("up", "-i", inv, timeout=300)
        out = said(refused)
        assert refused.returncode == 1 and "[node2/dry-fire-" in out, out
        assert "invalid choice: 'kimi_k3'" in out and "predates Kimi K3" in out, out
        assert "`docker rmi lmsysorg/sglang:kimi-k3` on it" in out, out

        tb.fault("engine-fault", "node2", "none")
        fixed = run("up", "-i", inv, timeout=600)
        assert fixed.returncode == 0, said(fixed)
        total_s = time.monotonic() - started
        assert "dry-fire: the group served with dummy weights" in said(fixed)
        for node in tb.nodes:
            log = engine_log(tb, node)
            assert "kernel caches hit" in log and "compiling kernels" not in log, log
        print(f"dry-fire verdict {verdict_s:.0f}s after up (Hub share {share:.0%}); "
              f"download and bring-up {total_s:.0f}s")
        again = run("up", "-i", inv, timeout=300)
        assert again.returncode == 0 and "dry-fire: the group" not in said(again)

"""The cookbook image's first multi-node decode hang (sgl-project/sglang#39568) on a 4-node
testbed with the profile sglang-kimi-k3-cookbook (standins/engine/decode_watchdog.py):

- with k3deploy's defaults against it turned off (`engine.args: {watchdog-timeout: null,
  disable-flashinfer-autotune: null}`), `up` fails in the dry-fire while the weights still
  download: its load (32 requests of 8192 prompt tokens) hangs the first decode, SGLang's
  scheduler watchdog (300 s, scaled down 50x) ends every rank, and the error names the cause
  and the fix. No real engine was started.
- with the defaults, the same cluster comes up and verifies.
"""

from __future__ import annotations

import time

import pytest
from failure_report import run, said
from tbfixture import testbed
from test_sglang_versions import engine_log, set_node

from k3run import changing_calls

pytestmark = pytest.mark.integration

# 192 MB at 4 x 450 kB/s: the Hub's share alone would take ~105 s (the peers fan out the
# rest), beside a verdict that needs the group up, the load's prefill and the watchdog.
SHARD_BYTES, NODE_RATE = 2_000_000, 450_000
SCALE = 0.02                                   # SGLang's 300 s watchdog fires by 9 s
OFF = "  args: {watchdog-timeout: null, disable-flashinfer-autotune: null}"


def hub_share(tb) -> float:
    hub = tb.stats()["hub"]
    return sum(n["bytes"] for n in hub["by_node"].values()) / hub["repo_bytes"]


def real_runs(tb) -> list[list[str]]:
    """`docker run`s of an engine without the dry-fire's label."""
    return [argv for argv in changing_calls(tb.stats()) if argv[1:2] == ["run"]
            and "serve" in argv and "k3deploy.dry-fire=1" not in argv]


def test_the_dry_fire_finds_the_first_decode_hang_and_the_defaults_avoid_it(tmp_path):
    with testbed(tmp_path, nodes=4, shard_bytes=SHARD_BYTES, hub_node_rate=NODE_RATE,
                 profile="sglang-kimi-k3-cookbook") as tb:
        set_node(tb, watchdog_time_scale=SCALE)
        inv = str(tb.inventory)
        original = tb.inventory.read_text()
        assert "  args: {}" in original
        tb.inventory.write_text(original.replace("  args: {}", OFF))
        started = time.monotonic()
        failed = run("up", "-i", inv, timeout=400)
        verdict_s, share = time.monotonic() - started, hub_share(tb)
        out = said(failed)
        assert failed.returncode == 1, out
        assert ("[node0/dry-fire] dry-fire (dummy weights): the first multi-node decode "
                "outlived SGLang's scheduler watchdog: TP0's scheduler made no forward progress "
                "for 300 s with a batch of ") in out, out
        assert "sgl-project/sglang#39568" in out, out
        assert ("--watchdog-timeout 3600 --disable-flashinfer-autotune "
                "--model-loader-extra-config") in out, out
        assert "turns off or changes watchdog-timeout, disable-flashinfer-autotune" in out, out
        assert share < 0.6, (f"{share:.0%} of the repo left the Hub before the verdict, "
                             f"{verdict_s:.0f}s after up")
        assert real_runs(tb) == [], "the real launch started a group that would hang"
        head, worker = engine_log(tb, "node0"), engine_log(tb, "node3")
        for log in (head, worker):
            assert "Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)" \
                in log, log[-3000:]
        assert "SIGQUIT received. signum=None, frame=None. It usually means one child failed." \
            in head
        assert "Received sigquit from a child process. It usually means the child failed." \
            in worker

        tb.inventory.write_text(original)
        fixed = run("up", "-i", inv, timeout=600)
        assert fixed.returncode == 0, said(fixed)
        assert "dry-fire: the group served with dummy weights" in said(fixed)
        verify = run("verify", "-i", inv)
        assert verify.returncode == 0, said(verify)
        for node in tb.nodes:
            assert "watchdog timeout" not in engine_log(tb, node)
        launched = real_runs(tb)
        assert launched and all("--disable-flashinfer-autotune" in argv for argv in launched)
        print(f"dry-fire verdict {verdict_s:.0f}s after up (Hub share {share:.0%}); "
              f"fixed bring-up {time.monotonic() - started:.0f}s")

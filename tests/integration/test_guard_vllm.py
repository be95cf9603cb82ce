"""The serve-time guard on vLLM (one 8x B300 node): vLLM counts a prompt's tokens only when its
prefill ends (v1/core/sched/scheduler.py, v1/metrics/stats.py; the stand-in counts so,
standins/engine/progress.py), so during one long prefill on a quiet server no counter moves.
Its KV usage does, after every chunk: a lone prefill three times `guard.wedge_seconds` long is
no wedge, and a frozen engine with a request outstanding still is."""

from __future__ import annotations

import threading
import time

import pytest
from guard_probe import all_stopped_within, api_key, ask, incident, swallow
from tbfixture import testbed

from k3run import k3, out

pytestmark = pytest.mark.integration

WEDGE_SECONDS = 5
CHUNK_SECONDS = 3    # the stand-in prefills 8 words a chunk: 40 words, 5 chunks, 15 s


def test_a_lone_vllm_prefill_three_wedges_long_is_no_wedge_and_a_frozen_engine_is(tmp_path):
    with testbed(tmp_path, nodes=1, gpu="b300", gpus_per_node=8, engine="vllm") as tb:
        tb.inventory.write_text(tb.inventory.read_text() +
                                f"guard: {{enabled: true, wedge_seconds: {WEDGE_SECONDS}}}\n")
        first = k3("up", "-i", str(tb.inventory))
        assert first.returncode == 0, out(first)
        key = api_key(tb)
        tb.fault("slow-prefill", "node0", str(CHUNK_SECONDS))
        started = time.monotonic()
        assert ask(tb, key, 40) == 200
        took = time.monotonic() - started
        assert took >= 3 * WEDGE_SECONDS, took
        assert incident(tb, "node0") is None, incident(tb, "node0")

        tb.fault("slow-prefill", "node0", "0")
        threading.Thread(target=lambda: swallow(ask, tb, key, 4, 120), daemon=True).start()
        time.sleep(0.5)   # the request is in the engine when it freezes
        tb.fault("wedge-engine", "node0")
        all_stopped_within(tb, tb.nodes, WEDGE_SECONDS + 15, time.monotonic())
        found = incident(tb, "node0")
        assert found and found["failure"]["kind"] == "wedged", found
        assert "rank 0 (node0): no progress" in found["failure"]["cause"], found

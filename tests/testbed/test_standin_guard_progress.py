"""The guard's wedge rule against the stand-in engines on loopback, at the real ratios: the
guard's own sampler (k3deploy/remote/guard_progress.Local) and verdict (guard_wedge.judge)
watch a stand-in engine whose every prefill chunk is slow.

vLLM counts a prompt only when its prefill ends, so during one prefill three times
`wedge_seconds` long its token counters stand still (the stand-in counts as vLLM 0.33.0 does:
scripts/tb/standins/engine/progress.py); what moves is the KV usage every step sets. A
stopped engine moves nothing and is still called wedged. SGLang's /health is a 1-token
generation that answers after the scheduler's next step with tokens: a busy server answers
later than the old 5 s probe timeout, and that is not dead. No root needed."""
import json
import os
import signal
import threading
import time
import urllib.request

import pytest
from standin_procs import free_port, make_node, sglang_cmd, vllm_cmd, wait_health

from k3deploy.remote import endpoint_probe, guard_progress, guard_wedge

WEDGE_SECONDS = 2.0
POLL = 0.5
SILENT_AFTER = 2 * POLL + guard_progress.SAMPLE_TIMEOUT + 1   # as guard.py, no peer hold
IDLE = {"started": None, "done_at": None, "error": None}


def slow_prefill(run, seconds):
    (run / "faults.json").write_text(json.dumps({"slow_prefill_seconds": seconds}))


def ask(port, words, result):
    body = {"model": "moonshotai/Kimi-K3", "max_tokens": 4, "reasoning_effort": "low",
            "messages": [{"role": "user", "content": " ".join(["word"] * words)}]}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    began = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            result["status"] = resp.status
    except OSError as err:
        result["status"] = str(err)
    result["seconds"] = time.monotonic() - began


class Watch:
    """The head guard's view of one engine: its sampler in a thread, a verdict every poll."""

    def __init__(self, port):
        self.local = guard_progress.Local(port, POLL)
        threading.Thread(target=self.local.run, daemon=True).start()

    def verdict(self):
        now = time.monotonic()
        return guard_wedge.judge(now, [guard_wedge.view("node0", 0, self.local.public(), now)],
                                 IDLE, WEDGE_SECONDS, SILENT_AFTER)

    def verdicts_while(self, thread, limit):
        found, deadline = [], time.monotonic() + limit
        while thread.is_alive() and time.monotonic() < deadline:
            verdict = self.verdict()
            if verdict:
                found.append(verdict)
            time.sleep(POLL)
        return found


@pytest.fixture
def vllm_server(cluster, tmp_path):
    run = make_node(tmp_path, "node0")
    port = free_port()
    proc = cluster.start(run, vllm_cmd(port, 8), image="vllm/vllm-openai:kimi-k3")
    wait_health(port, proc)
    return run, port, proc


def test_vllm_a_lone_prefill_three_times_wedge_seconds_is_not_a_wedge(vllm_server):
    run, port, _ = vllm_server
    slow_prefill(run, 1.5)   # 40 words + 4: 6 chunks of 8, 9 s of prefill = 4.5 x wedge_seconds
    watch, result = Watch(port), {}
    time.sleep(2 * POLL)
    before = guard_progress.parse_metrics(http_text(port))
    asked = threading.Thread(target=ask, args=(port, 40, result), daemon=True)
    asked.start()
    time.sleep(WEDGE_SECONDS + 2 * POLL)
    during = guard_progress.parse_metrics(http_text(port))
    verdicts = watch.verdicts_while(asked, 60)
    asked.join(5)
    assert result.get("status") == 200 and result["seconds"] >= 3 * WEDGE_SECONDS, result
    # vLLM's counters stood still mid-prefill (the prompt counts when it ends), KV grew
    assert during["tokens"] == before["tokens"] and during["running"] == 1, (before, during)
    assert during["kv"] > before["kv"], (before, during)
    assert verdicts == [], verdicts[0]


def test_vllm_a_stopped_engine_mid_request_is_still_a_wedge(vllm_server):
    run, port, proc = vllm_server
    slow_prefill(run, 1.0)
    watch, result = Watch(port), {}
    asked = threading.Thread(target=ask, args=(port, 40, result), daemon=True)
    asked.start()
    time.sleep(1.5)
    os.killpg(proc.pid, signal.SIGSTOP)
    try:
        began, verdict = time.monotonic(), None
        while verdict is None and time.monotonic() - began < WEDGE_SECONDS + SILENT_AFTER + 10:
            time.sleep(POLL)
            verdict = watch.verdict()
    finally:
        os.killpg(proc.pid, signal.SIGCONT)
    assert verdict and verdict["ranks"] == [{"node": "node0", "rank": 0}], verdict
    assert verdict["stalled_s"] >= WEDGE_SECONDS, verdict


def http_text(port):
    return guard_progress.get(port, "GET", "/metrics")[1].decode()


def test_sglang_health_on_a_busy_server_answers_late_and_healthy(cluster, tmp_path):
    """Each prefill chunk takes 6 s (> the old 5 s probe timeout, < SGLang's 20 s): /health
    waits for the scheduler's next step with tokens and answers 200; the probe k3deploy runs
    (remote/endpoint_probe.py) waits for it. Nothing answered at all: 503 after the
    engine's own SGLANG_HEALTH_CHECK_TIMEOUT, which the probe also outwaits."""
    run = make_node(tmp_path, "node0")
    port = free_port()
    proc = cluster.start(run, sglang_cmd(port, tp=8))
    wait_health(port, proc)
    slow_prefill(run, 6.0)
    result = {}
    threading.Thread(target=ask, args=(port, 30, result), daemon=True).start()
    time.sleep(1.0)
    began = time.monotonic()
    found = endpoint_probe.run_checks({"base": f"http://127.0.0.1:{port}", "key": None,
                                       "model": "moonshotai/Kimi-K3", "checks": ["health"]})
    took = time.monotonic() - began
    assert found["health"]["status"] == 200 and took > 5.0, (found, took)


def test_a_frozen_head_accepts_connections_and_is_caught_as_wedged(cluster, tmp_path):
    """SIGSTOP on SGLang's head mid-request: its uvicorn backlog (2048) keeps completing
    handshakes, so the guard's port check passes on every poll for the whole of
    wedge_seconds (60 polls at the defaults: 60 s, 1 s) and the wedge rule names the head by
    its silent metrics, not "port refused"."""
    from types import SimpleNamespace

    from k3deploy.remote import guard
    run = make_node(tmp_path, "node0")
    port = free_port()
    proc = cluster.start(run, sglang_cmd(port, "--enable-metrics", tp=8))
    wait_health(port, proc)
    slow_prefill(run, 1.0)
    watch, result = Watch(port), {}
    threading.Thread(target=ask, args=(port, 40, result), daemon=True).start()
    time.sleep(1.5)
    os.killpg(proc.pid, signal.SIGSTOP)
    head_guard = SimpleNamespace(cfg={"serve_port": port})
    try:
        accepted = [guard.Guard.serving(head_guard) for _ in range(60)]
        began, verdict = time.monotonic(), None
        while not (verdict and verdict["silent"]) and \
                time.monotonic() - began < WEDGE_SECONDS + SILENT_AFTER + 10:
            time.sleep(POLL)
            verdict = watch.verdict()
    finally:
        os.killpg(proc.pid, signal.SIGCONT)
    assert all(accepted), accepted.index(False)
    assert verdict and verdict["silent"], verdict
    assert "rank 0 (node0) stopped answering its metrics" in guard_wedge.cause_detail(verdict)

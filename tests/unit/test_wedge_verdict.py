"""The guard's progress view: the engines' /metrics parsed (real and reconstructed
transcripts, tests/fixtures/real), and the head guard's wedge verdict from what each rank
published. Facts in, decisions out."""

from pathlib import Path

from k3deploy.remote import guard_progress, guard_wedge

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"


def metrics(path: str) -> dict:
    return guard_progress.parse_metrics((REAL / path).read_text())


def test_sglang_docs_scrape_without_realtime_counter_uses_the_request_counters():
    found = metrics("sglang/docs-production-metrics/metrics.txt")
    assert found == {"running": 162.0, "queued": 2826.0, "tokens": 8.128902e6 + 7.557572e6,
                     "kv": None}


def test_sglang_schedulers_realtime_counter_summed_over_ranks_and_modes():
    found = metrics("sglang/collector-00ae9c15/metrics-two-ranks.txt")
    # Gauges: the largest series (each TP rank reports the same batch), not their sum.
    assert found == {"running": 3.0, "queued": 1.0, "tokens": 2 * (100 + 900 + 40), "kv": None}


def test_vllm_api_server_counters():
    found = metrics("vllm/loggers-a6f0308c/metrics.txt")
    assert found == {"running": 2.0, "queued": 0.0, "tokens": 5120.0 + 880.0, "kv": None}


def test_vllm_mid_prefill_counters_stand_still_and_kv_usage_is_progress(monkeypatch):
    """Two scrapes during one long prefill (vLLM 0.33.0): the counters are equal, the KV usage
    grew; the sampler counts that as a step done."""
    first, second = (REAL / "vllm/0.33.0/metrics-mid-prefill.txt").read_text().split(
        "# --- 20 s later ---\n")
    assert guard_progress.parse_metrics(first)["tokens"] == \
        guard_progress.parse_metrics(second)["tokens"] == 5120.0 + 880.0
    assert guard_progress.parse_metrics(second)["kv"] == 0.1171875
    scrapes = iter([first, second])
    monkeypatch.setattr(guard_progress, "get", lambda *a, **k: (200, next(scrapes).encode()))
    clock = iter([100.0, 100.0, 120.0])
    monkeypatch.setattr(guard_progress.time, "monotonic", lambda: next(clock))
    local = guard_progress.Local(9, 1.0)
    local.sample()
    local.sample()
    assert local.seen["changed_at"] == 120.0


def test_nothing_known_is_none_not_zero():
    assert guard_progress.parse_metrics("# nothing\nother_metric 3\n") == \
        {"running": None, "queued": None, "tokens": None, "kv": None}


def test_api_key_from_either_engines_file(tmp_path):
    (tmp_path / "s.yaml").write_text("api-key: sk-abc123\n")
    (tmp_path / "v.env").write_text("VLLM_API_KEY=sk-def456\n")
    assert guard_progress.read_api_key(str(tmp_path / "s.yaml")) == "sk-abc123"
    assert guard_progress.read_api_key(str(tmp_path / "v.env")) == "sk-def456"
    assert guard_progress.read_api_key(str(tmp_path / "missing")) is None


def rank(r, changed, answered, running=0, error=None):
    return {"node": f"node{r}", "rank": r, "tokens": 10.0, "running": running, "queued": 0,
            "error": error, "changed_at": changed, "answered_at": answered}


IDLE = {"started": None, "done_at": None, "error": None}


def test_busy_and_advancing_is_not_wedged():
    # A long prefill: requests running for minutes, but a counter moved 3 s ago.
    views = [rank(0, 997, 1000, running=4), rank(1, 990, 1000), rank(2, 300, 1000)]
    assert guard_wedge.judge(1000, views, IDLE, 60, 15) is None


def test_running_work_and_no_rank_moving_names_the_rank_that_stopped_answering():
    views = [rank(0, 900, 1000, running=2), rank(1, 900, 1000),
             rank(2, 900, 930, error="timed out"), rank(3, 900, 999)]
    verdict = guard_wedge.judge(1000, views, IDLE, 60, 15)
    assert verdict["ranks"] == [{"node": "node2", "rank": 2}] and verdict["silent"]
    assert verdict["stalled_s"] == 100
    assert "rank 2 (node2): metrics unanswered for 70s (timed out)" in verdict["seen"][2]
    detail = guard_wedge.cause_detail(verdict)
    assert detail.startswith("no rank advanced for 100s with work outstanding")
    assert "rank 2 (node2) stopped answering its metrics" in detail


def test_every_rank_answering_and_none_advancing_names_them_all():
    views = [rank(0, 900, 1000, running=1), rank(1, 900, 1000)]
    verdict = guard_wedge.judge(1000, views, IDLE, 60, 15)
    assert [r["rank"] for r in verdict["ranks"]] == [0, 1] and not verdict["silent"]


def test_idle_is_not_wedged_however_long_nothing_moved():
    views = [rank(0, 0, 1000), rank(1, 0, 1000)]
    assert guard_wedge.judge(1000, views, IDLE, 60, 15) is None


def test_an_unanswered_probe_is_work_outstanding_and_an_answered_one_is_progress():
    views = [rank(0, 100, 1000), rank(1, 100, 1000)]
    waiting = {"started": 930, "done_at": 920, "error": None}
    verdict = guard_wedge.judge(1000, views, waiting, 60, 15)
    assert verdict["stalled_s"] == 80 and verdict["probe"] == "1-token request unanswered for 70s"
    assert guard_wedge.judge(1000, views, {**waiting, "done_at": 990}, 60, 15) is None


def test_probe_only_when_idle_and_nothing_moved_lately():
    views = [rank(0, 990, 1000), rank(1, 990, 1000)]
    assert not guard_wedge.wants_probe(1000, views, IDLE, 15)
    assert guard_wedge.wants_probe(1010, views, IDLE, 15)
    assert not guard_wedge.wants_probe(1010, [rank(0, 900, 1000, running=3)], IDLE, 15)
    assert not guard_wedge.wants_probe(1010, views, {**IDLE, "started": 1005}, 15)


def test_view_puts_a_peers_ages_on_the_heads_clock():
    v = guard_wedge.view("node1", 1, {"tokens": 5.0, "running": 0, "queued": 0, "error": None,
                                      "still_s": 12.5, "unanswered_s": 0.4}, 500.0)
    assert v["changed_at"] == 487.5 and v["answered_at"] == 499.6
    assert guard_wedge.view("node1", 1, None, 500.0) is None


def test_a_rank_going_silent_is_waited_for_and_then_named_alone():
    """The wedge came late in the stall: the head's metrics failed 3 s ago (silent after 15).
    Naming every rank now would blame the three that answer; the verdict waits for it."""
    views = [rank(0, 900, 997, error="timed out"), rank(1, 900, 1000), rank(2, 900, 1000)]
    waiting = {"started": 950, "done_at": 900, "error": None}
    assert guard_wedge.judge(1000, views, waiting, 60, 15) is None
    verdict = guard_wedge.judge(1013, views, waiting, 60, 15)
    assert verdict["ranks"] == [{"node": "node0", "rank": 0}] and verdict["silent"]

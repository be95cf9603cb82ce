"""The pure parts of bench, the certificate and cost: statistics, diff, money."""

import pytest
from invdata import four_nodes

from k3deploy.serving import certificate, certificate_diff
from k3deploy.cluster import cost
from k3deploy.cli import speed_figures
from k3deploy.serving.bench_stats import RequestRecord, level_summary, percentile, single_stream_decode
from k3deploy.cluster.inventory import parse


def record(started, times, kinds, done=True, error=None):
    rec = RequestRecord(started=started)
    for t, k in zip(times, kinds):
        rec.token(t, k)
    rec.done, rec.error = done, error
    return rec


def test_percentile_is_nearest_rank():
    values = [float(i) for i in range(1, 101)]
    assert percentile(values, 50) == 50.0 and percentile(values, 99) == 99.0
    assert percentile([3.0], 99) == 3.0 and percentile([], 50) is None


def test_level_summary_counts_reasoning_apart_and_rates_over_the_window():
    # 1 reasoning + 3 content tokens, 0.1 s apart, first at 0.5 s after the start.
    a = record(0.0, [0.5, 0.6, 0.7, 0.8], ["reasoning", "content", "content", "content"])
    cut = record(1.0, [1.2, 1.3], ["reasoning", "reasoning"], done=False)  # cut at the bound
    failed = RequestRecord(started=2.0, error="APIConnectionError: refused")
    lv = level_summary([a, cut, failed], concurrency=2, window_s=2.0)
    assert (lv["requests"], lv["completed"], lv["errors"]) == (3, 1, 1)
    assert lv["ttft_s"]["p50"] == pytest.approx(0.2) and lv["ttft_s"]["p99"] == pytest.approx(0.5)
    assert lv["itl_s"]["p50"] == pytest.approx(0.1)
    assert lv["output_tok_s"] == 3.0 and lv["reasoning_tok_s"] == 1.5
    assert lv["per_stream_decode_tok_s"] == pytest.approx(10.0)   # only completed requests
    assert lv["error_samples"] == ["APIConnectionError: refused"]
    assert single_stream_decode([dict(lv, concurrency=1)]) == pytest.approx(10.0)


def test_guide_figure_only_for_4x8_h100_and_far_below_is_flagged():
    h100 = parse(four_nodes())
    b300 = parse(four_nodes(gpu={"model": "b300", "count": 8}, nodes=[
        {"name": "node0", "address": "10.0.0.1"}]))
    assert speed_figures.for_inventory(b300) is None
    fig = speed_figures.for_inventory(h100)
    assert fig["single_stream_tok_s"] == 5.8
    near = speed_figures.compare(fig, 6.2, [{"concurrency": 1, "output_tok_s": 6.0},
                                            {"concurrency": 4, "output_tok_s": 14.7}])
    assert near["far_below"] is False
    assert near["aggregate"] == [{"concurrency": 4, "guide_tok_s": 14.0, "measured_tok_s": 14.7,
                                  "ratio": 1.05}]
    slow = speed_figures.compare(fig, 0.58)
    assert slow["far_below"] is True and slow["ratio"] == 0.1
    assert speed_figures.compare(None, 6.0) is None


def test_flags_of_a_command_line():
    argv = ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--tp-size", "32",
            "--trust-remote-code", "--log-level=debug", "--enable-dp-attention"]
    assert certificate.flags_of(argv) == {"-m": "sglang.launch_server", "--model-path": "m",
                                          "--tp-size": "32", "--trust-remote-code": True,
                                          "--log-level": "debug", "--enable-dp-attention": True}


def cert(flags, engine="0.5.0", ttft=0.2, tok_s=6.0, digest="sha256:a"):
    facts = {"head": {"argv": flags, "image": "lmsysorg/sglang:kimi-k3", "image_digest": digest,
                      "config_digest": "c-" + "-".join(flags)},
             "engine_version": {"version": engine}}
    bench = {"levels": [{"concurrency": 1, "ttft_s": {"p50": ttft, "p99": ttft},
                         "itl_s": {"p50": 0.1, "p99": 0.1}, "output_tok_s": tok_s,
                         "reasoning_tok_s": 1.0, "per_stream_decode_tok_s": tok_s}]}
    return certificate.build("bench", "c", facts, verify={}, bench=bench, now=0)


def test_diff_names_flags_versions_and_latency_beyond_ten_percent():
    a = cert(["--tp-size", "32", "--log-level", "info"])
    b = cert(["--tp-size", "32", "--log-level", "debug", "--dist-timeout", "600"],
             engine="0.5.1", ttft=0.3, tok_s=6.3, digest="sha256:b")
    lines = [certificate_diff.render(c) for c in certificate_diff.diff(a, b)]
    assert "flag --log-level: info -> debug" in lines
    assert "flag --dist-timeout added: 600" in lines
    assert "version engine: 0.5.0 -> 0.5.1" in lines
    assert "version image_digest: sha256:a -> sha256:b" in lines
    assert "ttft_s.p50 at 1 stream(s): 0.2 -> 0.3 (+50%, worse)" in lines
    assert not any("output_tok_s" in line for line in lines)        # +5%: under the threshold
    assert certificate_diff.diff(a, a) == []


def test_certificate_is_written_once_per_second_without_overwriting(tmp_path):
    doc = cert(["--tp-size", "8"])
    first = certificate.write(tmp_path, doc, now=0)
    second = certificate.write(tmp_path, doc, now=0)
    assert first.name == "19700101T000000Z.json" and second.name == "19700101T000000Z-1.json"
    assert certificate.load(str(second))["launch"]["flags"] == {"--tp-size": "8"}


def test_cost_of_a_cluster():
    inv = parse(four_nodes(price={"per_gpu_hour": 2.91}))
    s = cost.summary(inv, 1800)
    assert s["per_hour"] == pytest.approx(93.12) and s["spent"] == pytest.approx(46.56)
    assert cost.money(93.12) == "$93.12" and cost.money(5, "CHF") == "5.00 CHF"
    assert cost.duration(3725) == "1h02m" and cost.duration(61) == "1m01s"
    assert cost.summary(parse(four_nodes()), 60) is None


def test_status_cost_from_the_earliest_running_container():
    from k3deploy.cli import status_cost
    inv = parse(four_nodes(price={"per_gpu_hour": 2.5}))
    started = status_cost.parse_started("2026-08-01T12:00:00.123456789Z")
    nodes = {"node0": {"live": {"container": {"running": True,
                                              "started": "2026-08-01T12:00:00.5Z"}}},
             "node1": {"live": {"container": {"running": False,
                                              "started": "2026-08-01T11:00:00Z"}}},
             "node2": {"live": {"reachable": False}}}
    c = status_cost.view(inv, nodes, started + 1800)
    assert c["per_hour"] == 80.0 and c["spent"] == 40.0
    assert status_cost.line(c) == ("cost: launched 30m00s ago, $40.00 since; burns $80.00/hour "
                                   "idle or busy (32 GPUs x $2.50/GPU-hour)")
    assert len(status_cost.line(c)) <= 100
    idle = status_cost.view(inv, {"node0": {"live": {"container": None}}}, started)
    assert idle["spent"] is None and "no engine running" in status_cost.line(idle)
    assert status_cost.parse_started("0001-01-01T00:00:00Z") is None


def test_ready_at_is_the_wall_clock_time_the_eta_points_to():
    import time as _time
    from k3deploy.run.ui_columns import ready_at
    now = _time.mktime((2026, 8, 1, 12, 0, 0, 0, 0, -1))
    assert ready_at(1800, now) == "ready ~" + _time.strftime("%H:%M %Z", _time.localtime(now + 1800))
    assert ready_at(1800, now).startswith("ready ~12:30")
    assert ready_at(None, now) == "ready ~?"

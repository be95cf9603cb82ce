"""After the endpoint is up (issue 11), on one shared testbed (a single 8x B300 SGLang node
whose stand-in engine decodes at RATE tok/s): `up` reports duration and cost and writes a
certificate; a scripted three-turn `chat` with tool calls keeps reasoning_content and sends
--effort; `bench --json` measures what the engine is set to and ends within its bound;
`status` shows cost. Needs root (the testbed)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
import yaml

from k3run import CLI_TIMEOUT, bounded_run
from tbfixture import testbed

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="the testbed needs root")]

REPO = Path(__file__).resolve().parents[2]
RATE = 40.0


def k3deploy(*args: str, stdin: str | None = None, timeout: float = CLI_TIMEOUT):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "K3DEPLOY_"))}
    proc = bounded_run([sys.executable, "-m", "k3deploy", *args], timeout, cwd=REPO, env=env,
                       input=stdin)
    proc.output = proc.stdout + proc.stderr
    return proc


def certificates(tb) -> list[Path]:
    cluster = yaml.safe_load(tb.inventory.read_text())["cluster"]
    return sorted((tb.inventory.parent / ".k3deploy" / cluster / "certificates").glob("*.json"))


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("served")
    with testbed(tmp, nodes=1, gpu="b300", gpus_per_node=8, engine="sglang",
                 overrides={"node0": {"decode_tok_s": RATE}}) as tb:
        doc = yaml.safe_load(tb.inventory.read_text())
        doc["price"] = {"per_gpu_hour": 2.49, "currency": "USD"}
        tb.inventory.write_text(yaml.safe_dump(doc))
        up = k3deploy("up", "-i", str(tb.inventory))
        assert up.returncode == 0, up.output
        yield tb, up


def test_up_reports_duration_and_cost_and_writes_a_certificate(served):
    tb, up = served
    assert "bring-up took" in up.stderr and "for 8 GPUs at $2.49/GPU-hour" in up.stderr
    assert "burns $19.92/hour" in up.stderr
    [path] = certificates(tb)
    assert f"certificate: {path}" in up.stderr
    cert = json.loads(path.read_text())
    assert cert["kind"] == "up" and cert["verify"]["node0"]["status"] == "ok"
    # The stand-in reports its profile's SGLang (0.5.16, the default) where 0.5.16 does.
    assert cert["versions"]["engine"] == {"version": "0.5.16", "path": "/server_info"}
    assert cert["versions"]["image_digest"].startswith("lmsysorg/sglang@sha256:")
    assert cert["launch"]["flags"]["--reasoning-parser"] == "kimi_k3"
    assert cert["launch"]["config_digest"] == cert["launch"]["config_digests"]["node0"]
    used = cert["gpu_memory_mib"]["node0"]["used"]
    assert len(used) == 8 and min(used) > 0.8 * cert["gpu_memory_mib"]["node0"]["total"][0]
    assert cert["bringup"]["cost"]["per_hour"] == pytest.approx(19.92)


def test_three_chat_turns_with_tool_calls_keep_reasoning_and_send_effort(served):
    tb, _ = served
    turns = "What time is it?\nWhich cluster is this?\nThanks, that is all.\n"
    chat = k3deploy("chat", "-i", str(tb.inventory), "--tools", "--effort", "medium", "--json",
                    stdin=turns)
    assert chat.returncode == 0, chat.output
    doc = json.loads(chat.stdout)
    assert doc["effort"] == "medium" and doc["effort_default"] is False
    assert "reasoning_effort: low (the default" not in chat.stderr
    messages = doc["messages"]
    assert [m["content"] for m in messages if m["role"] == "user"] == turns.splitlines()
    assistant = [m for m in messages if m["role"] == "assistant"]
    calls = [m for m in assistant if m.get("tool_calls")]
    answers = [m for m in assistant if not m.get("tool_calls")]
    assert len(calls) == 3 and len(answers) == 3                  # each turn: a call, an answer
    assert all(m["reasoning_content"] for m in assistant)          # kept whole in the history
    tools = [m for m in messages if m["role"] == "tool"]
    assert [t["tool_call_id"] for t in tools] == [c["tool_calls"][0]["id"] for c in calls]
    # The stand-in read the history each request carried: every earlier assistant message
    # came back with its reasoning_content (a dropped one would say "missing").
    for n, answer in enumerate(answers):
        assert f"all {2 * n + 1} earlier assistant message(s) kept reasoning_content" in \
            answer["content"], answer["content"]
    # medium effort reached every request: the stand-in thinks 48 tokens at medium.
    assert [r["reasoning_tokens"] for r in doc["requests"]] == [48] * 6


def test_one_shot_chat_says_effort_defaults_to_low(served):
    tb, _ = served
    chat = k3deploy("chat", "-i", str(tb.inventory), "Explain expert parallelism.")
    assert chat.returncode == 0, chat.output
    assert "reasoning_effort: low (the default" in chat.stderr
    assert chat.stdout.strip().startswith("Kimi K3 (testbed stand-in engine) answers: Explain")


def test_bench_json_is_plausible_for_the_engine_rate_and_bounded(served):
    tb, _ = served
    before = set(certificates(tb))
    started = time.monotonic()
    bench = k3deploy("bench", "-i", str(tb.inventory), "--seconds", "4", "--concurrency",
                     "1,4", "--json", timeout=120)
    took = time.monotonic() - started
    assert bench.returncode == 0, bench.output
    doc = json.loads(bench.stdout)
    single, four = doc["levels"]
    assert (single["concurrency"], four["concurrency"]) == (1, 4)
    for level in doc["levels"]:
        assert level["seconds"] <= 4 + 1.0                     # each level cut at its bound
        assert level["errors"] == 0 and level["completed"] >= 1
        assert level["ttft_s"]["p50"] > 0 and level["itl_s"]["p99"] >= level["itl_s"]["p50"]
        assert 0 < level["reasoning_tok_s"] < level["output_tok_s"]
    # The stand-in decodes at RATE for one stream; four share it (each slower, more in all).
    assert 0.5 * RATE <= doc["single_stream_decode_tok_s"] <= 1.05 * RATE
    assert four["per_stream_decode_tok_s"] < single["per_stream_decode_tok_s"]
    assert four["output_tok_s"] > single["output_tok_s"]
    assert doc["guide"] is None                                   # no guide figure for 1x8 B300
    assert took < 2 * 4 + 60                                      # levels + startup + SSH
    [new] = set(certificates(tb)) - before
    cert = json.loads(new.read_text())
    assert cert["kind"] == "bench" and cert["bench"]["levels"] == doc["levels"]
    assert doc["certificate"] == str(new)


def test_status_shows_time_since_launch_spend_and_burn(served):
    tb, _ = served
    status = k3deploy("status", "-i", str(tb.inventory))
    assert status.returncode == 0, status.output
    assert "cost: launched " in status.stdout and " since; burns " \
        "$19.92/hour idle or busy (8 GPUs x $2.49/GPU-hour)" in status.stdout
    doc = json.loads(k3deploy("status", "-i", str(tb.inventory), "--json").stdout)
    assert doc["cost"]["seconds_since_launch"] > 0 and doc["cost"]["spent"] >= 0

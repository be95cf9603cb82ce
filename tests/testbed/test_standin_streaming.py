"""The stand-in engines' streaming side: paced SSE tokens, usage with reasoning tokens, the
reasoning_content contract across turns, and the version the server reports. Loopback only,
no root (the process helpers of standin_procs.py)."""
import json
import time
import urllib.request

import pytest

from standin_procs import (CHAT, TOOLS, Cluster, free_port, http, make_node, sglang_cmd,
                           vllm_cmd, wait_health)

RATE = 80.0  # tokens per second for one stream


@pytest.fixture
def paced(tmp_path):
    """(port, flavor) of a paced engine, sglang and vllm, kimi_k3 parsers, no api key."""
    cluster = Cluster(tmp_path)
    try:
        yield lambda flavor: _start(cluster, tmp_path, flavor)
    finally:
        cluster.close()


def _start(cluster, tmp_path, flavor):
    run = make_node(tmp_path, f"node-{flavor}")
    facts = json.loads((run / "node.json").read_text())
    (run / "node.json").write_text(json.dumps(dict(facts, decode_tok_s=RATE)))
    port = free_port()
    parsers = ["--reasoning-parser", "kimi_k3", "--tool-call-parser", "kimi_k3"]
    if flavor == "sglang":
        proc = cluster.start(run, sglang_cmd(port, *parsers))
    else:
        proc = cluster.start(run, vllm_cmd(port, 8, "--enable-auto-tool-choice"),
                             image="vllm/vllm-openai:kimi-k3")
    wait_health(port, proc)
    return port


def stream(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
                                 data=json.dumps(dict(body, stream=True)).encode(),
                                 headers={"Content-Type": "application/json"})
    arrivals = []
    with urllib.request.urlopen(req, timeout=30) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if line.startswith("data: "):
                arrivals.append((time.monotonic(), line[6:]))
    return arrivals


@pytest.mark.parametrize("flavor", ["sglang", "vllm"])
def test_stream_is_one_token_per_chunk_at_the_decode_rate_with_usage(paced, flavor):
    port = paced(flavor)
    started = time.monotonic()
    events = stream(port, dict(CHAT, stream_options={"include_usage": True}))
    elapsed = time.monotonic() - started
    assert events[-1][1] == "[DONE]"
    chunks = [json.loads(e) for _, e in events[:-1]]
    usage = chunks[-1]["usage"]
    assert chunks[-1]["choices"] == []
    deltas = [c["choices"][0]["delta"] for c in chunks[:-1]]
    reasoning = [d["reasoning_content"] for d in deltas if d.get("reasoning_content")]
    content = [d["content"] for d in deltas if d.get("content")]
    assert len(reasoning) == usage["reasoning_tokens"] == 16   # effort low
    assert usage["completion_tokens_details"]["reasoning_tokens"] == 16
    assert len(reasoning) + len(content) == usage["completion_tokens"]   # reasoning is a part
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    # Paced: every token costs 1/RATE s (a lower bound only; the machine may be slower).
    assert elapsed >= 0.9 * (len(reasoning) + len(content)) / RATE
    if flavor == "vllm":
        assert all(d.get("reasoning") == d["reasoning_content"] for d in deltas
                   if d.get("reasoning_content"))


def test_effort_sets_the_reasoning_length(paced):
    port = paced("sglang")
    tokens = {e: http(port, "/v1/chat/completions", dict(CHAT, reasoning_effort=e))[1]["usage"]
              ["reasoning_tokens"] for e in ("low", "medium", "high")}
    assert tokens == {"low": 16, "medium": 48, "high": 120}


def tool_turn(port, keep_reasoning):
    """A user turn, the assistant's tool call (as the engine returned it), the tool result."""
    first = http(port, "/v1/chat/completions", dict(CHAT, tools=TOOLS))[1]
    assistant = first["choices"][0]["message"]
    assert assistant["tool_calls"] and assistant["reasoning_content"]
    if not keep_reasoning:
        assistant = {k: v for k, v in assistant.items() if k not in ("reasoning_content",
                                                                      "reasoning")}
    messages = CHAT["messages"] + [assistant, {
        "role": "tool", "tool_call_id": assistant["tool_calls"][0]["id"], "content": "sunny"}]
    return http(port, "/v1/chat/completions", dict(CHAT, messages=messages, tools=TOOLS))[1]


def test_after_a_tool_call_the_answer_says_whether_reasoning_came_back(paced):
    port = paced("sglang")
    kept = tool_turn(port, keep_reasoning=True)["choices"][0]
    assert kept["finish_reason"] == "stop"   # answers with the tool result, no second call
    assert "all 1 earlier assistant message(s) kept reasoning_content" in \
        kept["message"]["content"]
    dropped = tool_turn(port, keep_reasoning=False)["choices"][0]["message"]["content"]
    assert "reasoning_content missing from earlier assistant message(s) 1 of 1" in dropped


def test_engines_report_their_version_where_upstream_does(paced):
    port = paced("sglang")
    status, info = http(port, "/server_info")   # 0.5.16 (the default profile)
    assert status == 200 and info["version"] == "0.5.16" and info["reasoning_parser"] == "kimi_k3"
    assert http(port, "/get_server_info")[1] == info   # the deprecated alias still answers
    status, version = http(paced("vllm"), "/version")
    assert status == 200 and version["version"]

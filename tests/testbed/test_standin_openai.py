"""The stand-in engines' OpenAI API on loopback: reasoning and tool-call parsers (kimi_k3 and
the carried-over kimi_k2), the api key from a --config file, streaming. No root needed."""
import json
import urllib.request

import pytest
from standin_procs import (CHAT, TOOLS, free_port, http, make_node, sglang_cmd,
                           wait_health)


@pytest.fixture
def k3_server(cluster, tmp_path):
    """kimi_k3 parsers; the api key comes from a --config YAML file inside the container."""
    run = make_node(tmp_path, "node0")
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "engine.yaml").write_text("api-key: sk-test-key\nserved-model-name: kimi-k3\n")
    port = free_port()
    proc = cluster.start(run, sglang_cmd(port, "--reasoning-parser", "kimi_k3",
                                         "--tool-call-parser", "kimi_k3", "--config",
                                         "/etc/k3/engine.yaml"),
                         mounts=[{"host": str(conf_dir), "container": "/etc/k3", "ro": True}])
    wait_health(port, proc)
    return port


def test_kimi_k3_parser_splits_reasoning_and_counts_it_apart(k3_server):
    status, reply = http(k3_server, "/v1/chat/completions", CHAT, key="sk-test-key")
    assert status == 200
    message, usage = reply["choices"][0]["message"], reply["usage"]
    assert message["content"] and "<think>" not in message["content"]
    reasoning = usage["completion_tokens_details"]["reasoning_tokens"]
    assert len(message["reasoning_content"].split()) == reasoning > 0
    # Reasoning is a part of completion_tokens, not beside it.
    assert usage["completion_tokens"] == reasoning + len(message["content"].split())
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    high = http(k3_server, "/v1/chat/completions", dict(CHAT, reasoning_effort="high"),
                key="sk-test-key")[1]
    assert high["usage"]["completion_tokens_details"]["reasoning_tokens"] > reasoning
    assert http(k3_server, "/v1/models", key="sk-test-key")[1]["data"][0]["id"] == "kimi-k3"


def test_kimi_k3_tool_parser_returns_tool_calls(k3_server):
    body = dict(CHAT, tools=TOOLS)
    reply = http(k3_server, "/v1/chat/completions", body, key="sk-test-key")[1]
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    call = choice["message"]["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}


def test_api_key_and_bad_json(k3_server):
    assert http(k3_server, "/v1/chat/completions", CHAT)[0] == 401
    assert http(k3_server, "/v1/chat/completions", CHAT, key="wrong")[0] == 401
    assert http(k3_server, "/v1/models")[0] == 401
    assert http(k3_server, "/health")[0] == 200          # health needs no key
    assert http(k3_server, "/health_generate")[0] == 200
    status, reply = http(k3_server, "/v1/chat/completions", raw=b"{not json", key="sk-test-key")
    assert status == 400 and reply["code"] == 400


def test_streaming_sends_reasoning_then_content_then_done(k3_server):
    req = urllib.request.Request(f"http://127.0.0.1:{k3_server}/v1/chat/completions",
                                 data=json.dumps(dict(CHAT, stream=True)).encode(),
                                 headers={"Authorization": "Bearer sk-test-key"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        events = [line[6:] for line in resp.read().decode().splitlines()
                  if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    deltas = [json.loads(e)["choices"][0]["delta"] for e in events[:-1]]
    assert any(d.get("reasoning_content") for d in deltas)
    assert any(d.get("content") for d in deltas)


def test_kimi_k2_parsers_leak_thinking_and_tool_markup_into_content(cluster, tmp_path):
    port = free_port()
    proc = cluster.start(make_node(tmp_path, "node0"),
                         sglang_cmd(port, "--reasoning-parser", "kimi_k2",
                                    "--tool-call-parser", "kimi_k2"))
    wait_health(port, proc)
    reply = http(port, "/v1/chat/completions", CHAT)[1]
    message = reply["choices"][0]["message"]
    assert message["content"].startswith("<think>") and "</think>" in message["content"]
    assert not message["reasoning_content"]
    assert reply["usage"]["reasoning_tokens"] == 0
    tools = http(port, "/v1/chat/completions", dict(CHAT, tools=TOOLS))[1]["choices"][0]
    assert tools["finish_reason"] == "stop" and not tools["message"]["tool_calls"]
    assert "functions.get_weather:0" in tools["message"]["content"]

"""A streamed reply is put back together whole, and tools answer locally."""

import json

from invdata import four_nodes

from k3deploy.serving import chat_tools
from k3deploy.serving.chat_stream import AssistantReply
from k3deploy.cluster.inventory import parse


def minimal_inventory():
    return parse(four_nodes())


def chunk(delta=None, finish=None, usage=None):
    doc = {"choices": [] if delta is None else [{"index": 0, "delta": delta,
                                                 "finish_reason": finish}]}
    return dict(doc, usage=usage) if usage else doc


def test_reasoning_content_and_tool_call_pieces_become_one_message():
    reply = AssistantReply()
    shown = []
    for c in [chunk({"role": "assistant", "content": ""}),
              chunk({"reasoning_content": "I should"}), chunk({"reasoning_content": " check."}),
              chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                     "function": {"name": "utc_", "arguments": '{"a"'}}]}),
              chunk({"tool_calls": [{"index": 0, "function": {"name": "now",
                                                              "arguments": ": 1}"}}]}),
              chunk({}, finish="tool_calls"),
              chunk(usage={"completion_tokens": 3,
                           "completion_tokens_details": {"reasoning_tokens": 2}})]:
        shown += reply.add(c)
    assert shown == [("reasoning", "I should"), ("reasoning", " check.")]
    assert reply.message() == {
        "role": "assistant", "content": None, "reasoning_content": "I should check.",
        "tool_calls": [{"id": "call_1", "type": "function",
                        "function": {"name": "utc_now", "arguments": '{"a": 1}'}}]}
    assert reply.finish == "tool_calls" and reply.reasoning_tokens() == 2


def test_vllm_reasoning_name_is_kept_beside_reasoning_content():
    reply = AssistantReply()
    reply.add(chunk({"reasoning": "hmm"}))
    reply.add(chunk({"content": "Hi"}))
    assert reply.message() == {"role": "assistant", "content": "Hi",
                               "reasoning_content": "hmm", "reasoning": "hmm"}
    assert reply.reasoning_tokens() is None


def test_tools_answer_with_their_call_id_and_refuse_unknown_names():
    inv = minimal_inventory()
    ok = chat_tools.call(inv, {"id": "c1", "function": {"name": "cluster_info",
                                                        "arguments": "{}"}})
    assert ok["tool_call_id"] == "c1" and json.loads(ok["content"])["cluster"] == inv.cluster
    bad = chat_tools.call(inv, {"id": "c2", "function": {"name": "rm", "arguments": "{}"}})
    assert bad["content"].startswith("error: no tool 'rm'")
    assert {t["function"]["name"] for t in chat_tools.schemas()} == set(chat_tools.TOOLS)

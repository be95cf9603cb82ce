"""A chat completion as the engines stream it (SSE): one chunk per token, reasoning first in
`reasoning_content` deltas, then `content`, then `tool_calls`, then the finish chunk; with
`stream_options.include_usage` a last chunk with `usage` and no choices; then `[DONE]`.
Tokens are words here (as in chat.py), paced by the engine's decode rate.
"""
import json


def token_deltas(message, vllm):
    """The deltas after the role chunk, one per token."""
    out = []
    reasoning = message.get("reasoning_content") or ""
    for i, word in enumerate(reasoning.split()):
        text = word if i == 0 else " " + word
        delta = {"reasoning_content": text}
        if vllm:  # vLLM sends the newer `reasoning` name alongside
            delta["reasoning"] = text
        out.append(delta)
    for i, word in enumerate((message.get("content") or "").split(" ")):
        text = word if i == 0 else " " + word
        if text:
            out.append({"content": text})
    if message.get("tool_calls"):
        out.append({"tool_calls": message["tool_calls"]})
    return out


def write_stream(wfile, body, completion, pacer, vllm):
    choice = completion["choices"][0]
    base = {k: completion[k] for k in ("id", "created", "model")}
    base["object"] = "chat.completion.chunk"

    def event(obj):
        wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
        wfile.flush()

    def chunk(delta, finish=None):
        event(dict(base, choices=[{"index": 0, "delta": delta, "logprobs": None,
                                   "finish_reason": finish}]))

    with pacer:
        chunk({"role": "assistant", "content": ""})
        for delta in token_deltas(choice["message"], vllm):
            pacer.wait(1)
            chunk(delta)
        chunk({}, choice["finish_reason"])
    if (body.get("stream_options") or {}).get("include_usage"):
        event(dict(base, choices=[], usage=completion["usage"]))
    wfile.write(b"data: [DONE]\n\n")
    wfile.flush()

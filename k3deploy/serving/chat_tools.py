"""Local, read-only tools `k3deploy chat --tools` offers the model, to try tool calling
against the endpoint: the laptop runs them and sends the result back."""

from __future__ import annotations

import json
from datetime import datetime, UTC


def _utc_now(_inv, _args: dict) -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _cluster_info(inv, _args: dict) -> str:
    return json.dumps({"cluster": inv.cluster, "model": inv.model.repo,
                       "engine": inv.engine.kind, "nodes": len(inv.nodes),
                       "gpu": f"{inv.gpu.count}x {inv.gpu.model}"})


TOOLS = {
    "utc_now": (_utc_now, "The current date and time in UTC.", {}),
    "cluster_info": (_cluster_info, "What this endpoint runs on: cluster, model, engine, GPUs.",
                     {}),
}


def schemas() -> list[dict]:
    return [{"type": "function", "function": {
        "name": name, "description": text,
        "parameters": {"type": "object", "properties": props, "required": list(props)}}}
        for name, (_, text, props) in TOOLS.items()]


def call(inv, tool_call: dict) -> dict:
    """The `tool` message answering one tool call (an unknown tool gets an error text)."""
    fn = tool_call.get("function") or {}
    entry = TOOLS.get(fn.get("name"))
    try:
        args = json.loads(fn.get("arguments") or "{}")
    except ValueError:
        args = None
    if entry is None or not isinstance(args, dict):
        result = f"error: no tool {fn.get('name')!r} with arguments {fn.get('arguments')!r}"
    else:
        result = entry[0](inv, args)
    return {"role": "tool", "tool_call_id": tool_call.get("id"), "content": result}

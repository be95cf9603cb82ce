"""Local, read-only tools `k3deploy chat --tools` offers the model, to try tool calling
against the endpoint: the laptop runs them and sends the result back."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, UTC
from typing import TypedDict

from k3deploy.cluster.inventory import Inventory
from k3deploy.core.jsonvalue import JSON
from k3deploy.serving.chat_stream import ToolCall

Tool = Callable[[Inventory, dict[str, JSON]], str]   # (inventory, the call's arguments) -> result


def _utc_now(_inv: Inventory, _args: dict[str, JSON]) -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _cluster_info(inv: Inventory, _args: dict[str, JSON]) -> str:
    return json.dumps({"cluster": inv.cluster, "model": inv.model.repo,
                       "engine": inv.engine.kind, "nodes": len(inv.nodes),
                       "gpu": f"{inv.gpu.count}x {inv.gpu.model}"})


TOOLS: dict[str, tuple[Tool, str, dict[str, JSON]]] = {   # name -> (run, description, properties)
    "utc_now": (_utc_now, "The current date and time in UTC.", {}),
    "cluster_info": (_cluster_info, "What this endpoint runs on: cluster, model, engine, GPUs.",
                     {}),
}


def schemas() -> list[dict[str, JSON]]:
    return [{"type": "function", "function": {
        "name": name, "description": text,
        "parameters": {"type": "object", "properties": props, "required": list(props)}}}
        for name, (_, text, props) in TOOLS.items()]


class ToolMessage(TypedDict):
    role: str
    tool_call_id: str | None
    content: str


def call(inv: Inventory, tool_call: ToolCall) -> ToolMessage:
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

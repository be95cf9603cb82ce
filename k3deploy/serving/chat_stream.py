"""One streamed assistant reply put back together, whole: content, reasoning_content and
tool_calls, as K3 expects to get it back on the next turn (most wrappers drop the reasoning).

Pure: chunks in (as dicts), the message and what to show out.
"""

from __future__ import annotations

from typing import TypedDict

REASONING_FIELDS = ("reasoning_content", "reasoning")  # vLLM also names it `reasoning`


class FunctionCall(TypedDict):
    name: str
    arguments: str   # JSON text, as the model wrote it


class ToolCall(TypedDict):
    """One tool call of a reply, its streamed pieces joined (OpenAI's message format)."""
    id: str | None
    type: str
    function: FunctionCall


class AssistantReply:
    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, ToolCall] = {}
        self.usage: dict | None = None
        self.finish: str | None = None
        self.fields: set[str] = set()

    def add(self, chunk: dict) -> list[tuple[str, str]]:
        """Take one chunk; return what it adds as (kind, text), kind reasoning|content."""
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        shown = []
        for choice in chunk.get("choices") or []:
            self.finish = choice.get("finish_reason") or self.finish
            shown += self._delta(choice.get("delta") or {})
        return shown

    def _delta(self, delta: dict) -> list[tuple[str, str]]:
        shown = []
        name = next((f for f in REASONING_FIELDS if delta.get(f)), None)
        if name:
            self.fields.add(name)
            self.reasoning.append(delta[name])
            shown.append(("reasoning", delta[name]))
        if delta.get("content"):
            self.content.append(delta["content"])
            shown.append(("content", delta["content"]))
        for piece in delta.get("tool_calls") or []:
            self._merge_call(piece)
        return shown

    def _merge_call(self, piece: dict) -> None:
        """Tool calls stream in pieces keyed by index; arguments arrive as string fragments."""
        call = self.calls.setdefault(piece.get("index", len(self.calls)), {
            "id": None, "type": "function", "function": {"name": "", "arguments": ""}})
        call["id"] = piece.get("id") or call["id"]
        fn = piece.get("function") or {}
        call["function"]["name"] += fn.get("name") or ""
        call["function"]["arguments"] += fn.get("arguments") or ""

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [self.calls[i] for i in sorted(self.calls)]

    def message(self) -> dict:
        """The whole assistant message for the history."""
        msg = {"role": "assistant", "content": "".join(self.content) or None}
        reasoning = "".join(self.reasoning)
        if reasoning:
            msg["reasoning_content"] = reasoning
            if "reasoning" in self.fields:
                msg["reasoning"] = reasoning
        if self.calls:
            msg["tool_calls"] = self.tool_calls
        return msg

    def reasoning_tokens(self) -> int | None:
        usage = self.usage or {}
        details = usage.get("completion_tokens_details") or {}
        value = details.get("reasoning_tokens", usage.get("reasoning_tokens"))
        return None if value is None else int(value)

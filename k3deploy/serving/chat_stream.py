"""One streamed assistant reply put back together, whole: content, reasoning_content and
tool_calls, as K3 expects to get it back on the next turn (most wrappers drop the reasoning).

Pure: chunks in (as dicts), the message and what to show out.
"""

from __future__ import annotations

from typing import TypedDict

from k3deploy.core.jsonvalue import JSON

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
        self.usage: dict[str, JSON] | None = None
        self.finish: str | None = None
        self.fields: set[str] = set()

    def add(self, chunk: dict[str, JSON]) -> list[tuple[str, str]]:
        """Take one chunk; return what it adds as (kind, text), kind reasoning|content."""
        usage = chunk.get("usage")
        if usage and isinstance(usage, dict):
            self.usage = usage
        shown = []
        for choice in _list(chunk.get("choices")):
            choice = _object(choice)
            self.finish = _str(choice.get("finish_reason")) or self.finish
            shown += self._delta(_object(choice.get("delta")))
        return shown

    def _delta(self, delta: dict[str, JSON]) -> list[tuple[str, str]]:
        shown = []
        name = next((f for f in REASONING_FIELDS if _str(delta.get(f))), None)
        if name:
            text = _str(delta[name]) or ""
            self.fields.add(name)
            self.reasoning.append(text)
            shown.append(("reasoning", text))
        content = _str(delta.get("content"))
        if content:
            self.content.append(content)
            shown.append(("content", content))
        for piece in _list(delta.get("tool_calls")):
            self._merge_call(_object(piece))
        return shown

    def _merge_call(self, piece: dict[str, JSON]) -> None:
        """Tool calls stream in pieces keyed by index; arguments arrive as string fragments."""
        index = piece.get("index")
        call = self.calls.setdefault(index if isinstance(index, int) else len(self.calls), {
            "id": None, "type": "function", "function": {"name": "", "arguments": ""}})
        call["id"] = _str(piece.get("id")) or call["id"]
        fn = _object(piece.get("function"))
        call["function"]["name"] += _str(fn.get("name")) or ""
        call["function"]["arguments"] += _str(fn.get("arguments")) or ""

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [self.calls[i] for i in sorted(self.calls)]

    def message(self) -> dict[str, JSON]:
        """The whole assistant message for the history."""
        msg: dict[str, JSON] = {"role": "assistant", "content": "".join(self.content) or None}
        reasoning = "".join(self.reasoning)
        if reasoning:
            msg["reasoning_content"] = reasoning
            if "reasoning" in self.fields:
                msg["reasoning"] = reasoning
        if self.calls:
            msg["tool_calls"] = [{"id": c["id"], "type": c["type"],
                                  "function": {"name": c["function"]["name"],
                                               "arguments": c["function"]["arguments"]}}
                                 for c in self.tool_calls]
        return msg

    def reasoning_tokens(self) -> int | None:
        usage = self.usage or {}
        details = _object(usage.get("completion_tokens_details"))
        value = details.get("reasoning_tokens", usage.get("reasoning_tokens"))
        return int(value) if isinstance(value, (int, float, str)) else None


# A chunk is the client's model dumped without its None fields (chat_session): these read
# it as JSON, an absent or other-typed value as nothing.
def _str(value: JSON) -> str | None:
    return value if isinstance(value, str) else None


def _object(value: JSON) -> dict[str, JSON]:
    return value if isinstance(value, dict) else {}


def _list(value: JSON) -> list[JSON]:
    return value if isinstance(value, list) else []

"""A conversation with the endpoint that keeps every assistant message whole.

K3 expects the complete previous assistant message on each turn, reasoning_content and
tool_calls included; this history is what is sent back. A turn that calls tools runs them
locally and asks again, a bounded number of times.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, cast

from k3deploy.core.errors import BadInputError
from k3deploy.core.jsonvalue import JSON
from k3deploy.serving import chat_tools
from k3deploy.serving.chat_stream import AssistantReply

if TYPE_CHECKING:
    import openai   # imported when the client is made (serving/openai_client.py)

    from k3deploy.cluster.inventory import Inventory

Effort = Literal["low", "medium", "high"]   # what the command line offers of reasoning_effort
EFFORTS: tuple[Effort, ...] = ("low", "medium", "high")
DEFAULT_EFFORT: Effort = "low"
MAX_TOOL_ROUNDS = 4

Sink = Callable[[str, str], None]   # (kind: reasoning|content|tool, text)


@dataclass
class Conversation:
    client: openai.OpenAI
    model: str
    effort: Effort
    inv: Inventory
    tools: bool = False
    messages: list[dict[str, JSON]] = field(default_factory=list)
    replies: list[dict[str, JSON]] = field(default_factory=list)   # per request: usage, finish

    def ask(self, text: str, sink: Sink) -> dict[str, JSON]:
        """One user turn; returns the final assistant message."""
        self.messages.append({"role": "user", "content": text})
        for _ in range(MAX_TOOL_ROUNDS + 1):
            reply = self._request(sink)
            message = reply.message()
            self.messages.append(message)
            if not reply.calls:
                return message
            for call in reply.tool_calls:
                result = chat_tools.call(self.inv, call)
                sink("tool", f"{call['function']['name']}({call['function']['arguments']})"
                     f" -> {result['content']}")
                self.messages.append({"role": result["role"], "tool_call_id": result["tool_call_id"],
                                      "content": result["content"]})
        return message

    def _request(self, sink: Sink) -> AssistantReply:
        # loaded with the client; omit: the key is not sent
        from openai import omit
        from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolUnionParam
        # The history is OpenAI's message format plus reasoning_content, which K3 wants back and
        # OpenAI's TypedDicts do not declare; the client sends each message's keys as they are.
        messages = cast(list[ChatCompletionMessageParam], self.messages)
        # chat_tools.schemas() are OpenAI function tools, written as plain JSON
        tools = cast(list[ChatCompletionToolUnionParam], chat_tools.schemas()) if self.tools else omit
        stream = self.client.chat.completions.create(
            model=self.model, messages=messages, reasoning_effort=self.effort,
            stream=True, stream_options={"include_usage": True}, tools=tools)
        reply = AssistantReply()
        for chunk in stream:
            for kind, piece in reply.add(chunk.model_dump(exclude_none=True)):
                sink(kind, piece)
        self.replies.append({"usage": reply.usage, "finish_reason": reply.finish,
                             "reasoning_tokens": reply.reasoning_tokens()})
        return reply


def effort_of(text: str) -> Effort:
    """A reasoning_effort the command line took (its choices are EFFORTS)."""
    for effort in EFFORTS:
        if effort == text:
            return effort
    raise BadInputError(f"reasoning_effort {text!r} is not one of {', '.join(EFFORTS)}")

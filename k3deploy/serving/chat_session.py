"""A conversation with the endpoint that keeps every assistant message whole.

K3 expects the complete previous assistant message on each turn, reasoning_content and
tool_calls included; this history is what is sent back. A turn that calls tools runs them
locally and asks again, a bounded number of times.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Callable
from typing import TYPE_CHECKING

from k3deploy.core.jsonvalue import JSON
from k3deploy.serving import chat_tools
from k3deploy.serving.chat_stream import AssistantReply

if TYPE_CHECKING:
    import openai   # imported when the client is made (serving/openai_client.py)

    from k3deploy.cluster.inventory import Inventory

DEFAULT_EFFORT = "low"
MAX_TOOL_ROUNDS = 4

Sink = Callable[[str, str], None]   # (kind: reasoning|content|tool, text)


@dataclass
class Conversation:
    client: openai.OpenAI
    model: str
    effort: str
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
                self.messages.append(result)
        return message

    def _request(self, sink: Sink) -> AssistantReply:
        extra = {"tools": chat_tools.schemas()} if self.tools else {}
        stream = self.client.chat.completions.create(
            model=self.model, messages=self.messages, reasoning_effort=self.effort,
            stream=True, stream_options={"include_usage": True}, **extra)
        reply = AssistantReply()
        for chunk in stream:
            for kind, piece in reply.add(chunk.model_dump(exclude_none=True)):
                sink(kind, piece)
        self.replies.append({"usage": reply.usage, "finish_reason": reply.finish,
                             "reasoning_tokens": reply.reasoning_tokens()})
        return reply

"""What remote/endpoint_probe.py found on the head's loopback: one answer per check it was
asked (health, models, chat, tools, vision, version), typed.

The program prints one JSON object, {check: {"status": int, "body": JSON or text} or
{"status": null, "error": why}}; the bodies are OpenAI-compatible documents (a chat
completion's choices[0].message, /v1/models' data[].id, an error's {"error": {"message"}} or
{"message"}) or the version the program settled ({"version", "path"}). Only what the steps
judge is kept of them."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields

from k3deploy.remote.protocol import JSON
from k3deploy.facts.lastjson import last_json_line

NO_RESULT = "no probe result"
TEXT_KEPT = 500   # of a body, for messages (the program keeps as much of a text body)


@dataclass(frozen=True)
class Message:
    """A chat completion's first choice's message. SGLang carries the chain of thought in
    `reasoning_content`; vLLM may name it `reasoning` (newer releases), or send both."""
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: int = 0


@dataclass(frozen=True)
class Version:
    version: str
    path: str            # where the engine said it: /version, /server_info, /get_server_info


@dataclass(frozen=True)
class Answer:
    status: int | None              # None: no HTTP answer at all
    error: str | None = None        # why no answer came (refused, timed out)
    text: str | None = None         # the body as it came (JSON as text), for messages
    said: str | None = None         # the message an error body carries
    message: Message | None = None  # a chat completion's
    models: tuple[str, ...] = ()    # /v1/models' ids
    version: Version | None = None

    @property
    def ok(self) -> bool:
        return self.status == 200

    def shown(self) -> str:
        """What a message quotes of it: the body, else why none came."""
        return str(self.text or self.error)[:200]


@dataclass(frozen=True)
class Endpoint:
    """One answer per check asked that a step reads; None for a check not asked."""
    health: Answer | None = None
    models: Answer | None = None
    chat: Answer | None = None
    tools: Answer | None = None
    vision: Answer | None = None
    version: Answer | None = None
    decode_batch: Answer | None = None   # the dry-fire's load (remote/endpoint_probe.py)


CHECKS = frozenset(f.name for f in fields(Endpoint))


def parse_endpoint(out: str, code: int) -> Endpoint | None:
    """The program's last line; None when it printed no JSON object (it did not run)."""
    doc = last_json_line(out)
    if not isinstance(doc, dict):
        return None
    return Endpoint(**{check: answer(res) for check, res in doc.items() if check in CHECKS})


def unanswered(checks: list[str]) -> Endpoint:
    """Every check without an answer: what a probe that did not run found."""
    return Endpoint(**{c: Answer(None, error=NO_RESULT) for c in checks})


def answer(res: object) -> Answer:
    """One check's {"status", "body"} or {"status": null, "error"}."""
    if not isinstance(res, dict):
        return Answer(None, error=NO_RESULT)
    status, body = res.get("status"), res.get("body")
    doc = body if isinstance(body, dict) else {}
    return Answer(status if isinstance(status, int) else None, _str(res.get("error")),
                  _text(body), _said(doc), _message(doc), _models(doc), _version(doc))


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _text(body: object) -> str | None:
    if body is None or body == "":
        return None
    return (body if isinstance(body, str) else json.dumps(body))[:TEXT_KEPT]


def _said(doc: dict[str, JSON]) -> str | None:
    error = doc.get("error")
    return _str(doc.get("message")) or (_str(error.get("message")) if isinstance(error, dict)
                                         else None)


def _message(doc: dict[str, JSON]) -> Message | None:
    choices = doc.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    msg = choices[0].get("message")
    if not isinstance(msg, dict):
        return Message()
    calls = msg.get("tool_calls")
    return Message(_str(msg.get("content")), _str(msg.get("reasoning_content")),
                   _str(msg.get("reasoning")), len(calls) if isinstance(calls, list) else 0)


def _models(doc: dict[str, JSON]) -> tuple[str, ...]:
    data = doc.get("data")
    if not isinstance(data, list):
        return ()
    return tuple(name for m in data if isinstance(m, dict) and isinstance(name := m.get("id"), str))


def _version(doc: dict[str, JSON]) -> Version | None:
    version, path = doc.get("version"), doc.get("path")
    return Version(version, path) if isinstance(version, str) and isinstance(path, str) else None


def summary(found: Endpoint | None) -> dict[str, JSON] | None:
    """The answers in `k3deploy status --json`: each check's status and why none came."""
    if found is None:
        return None
    return {f.name: {"status": a.status, "error": a.error or a.said}
            for f in fields(Endpoint) if (a := getattr(found, f.name)) is not None}

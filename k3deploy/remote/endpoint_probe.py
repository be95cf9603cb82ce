"""Node side (head): probe the OpenAI-compatible endpoint on loopback. Stdlib only.

Reads {"base", "key", "model", "checks": [...], "within": seconds or null} as JSON on stdin
(the key never in argv), prints one JSON object with a result per check. With `within`, every
request ends by that deadline: a request still unanswered then reads as timed out.
"""

import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import TYPE_CHECKING, TypedDict

try:
    from thread_pool import pool   # bundled ahead of this program (node/http_probe.py)
except ImportError:                # imported from the package (the unit tests)
    if not TYPE_CHECKING:  # the same file by its package name: mypy checks it as thread_pool
        from k3deploy.remote.thread_pool import pool

# The types are for mypy: what the head's python3 evaluates of them is no newer than before
# (quoted; no `from __future__ import annotations`: bundled() appends this file to other code).
if TYPE_CHECKING:
    from typing import TypeAlias

    # protocol.JSON's: this program is bundled with thread_pool.py only
    JSON: TypeAlias = dict[str, "JSON"] | list["JSON"] | str | int | float | bool | None


class Config(TypedDict, total=False):
    """stdin (node/http_probe.py _config), and `until`, the deadline `within` sets."""
    base: str
    key: "str | None"
    model: str
    checks: "list[str]"
    health_timeout: float
    within: "float | None"
    until: float
    decode_timeout: float          # decode_batch's (steps/dry_fire/dry_fire_hang.py)
    prompt_limit: "int | None"


class Answer(TypedDict, total=False):
    """One check's result: the HTTP status and the body (JSON, else its first 500 characters),
    or no status and why."""
    status: "int | None"
    body: "JSON"
    error: str


TOOL: "JSON" = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
# A 2x2 red PNG: the smallest image every processor accepts, so the probe tests that the
# vision path answers, not how well it sees.
PNG_B64 = ("iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAEElEQVR4nGP4z8AARAwQCgAf7gP9i18U1AAAA"
           "ABJRU5ErkJggg==")


def call(cfg: Config, path: str, body: "JSON" = None, timeout: float = 60) -> Answer:
    if cfg.get("until") is not None:
        timeout = max(0.1, min(timeout, cfg["until"] - time.monotonic()))
    req = urllib.request.Request(cfg["base"] + path, method="POST" if body else "GET",
                                 data=json.dumps(body).encode() if body else None)
    req.add_header("Content-Type", "application/json")
    if key := cfg.get("key"):
        req.add_header("Authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            text = resp.read().decode(errors="replace")
            return {"status": resp.status, "body": _json(text)}
    except urllib.error.HTTPError as err:
        return {"status": err.code, "body": _json(err.read().decode(errors="replace"))}
    except (urllib.error.URLError, OSError) as err:
        return {"status": None, "error": str(getattr(err, "reason", err))}


def _json(text: str) -> "JSON":
    try:
        doc: JSON = json.loads(text)
        return doc
    except ValueError:
        return text[:500]


def chat(cfg: Config, tools: bool = False) -> Answer:
    body: dict[str, JSON] = {"model": cfg["model"], "max_tokens": 256, "reasoning_effort": "low",
            "messages": [{"role": "user", "content": "Explain expert parallelism in two sentences."
                          if not tools else "What is the weather in Paris? Use the tool."}]}
    if tools:
        body["tools"] = [TOOL]
    return call(cfg, "/v1/chat/completions", body, timeout=300)


def vision(cfg: Config) -> Answer:
    """The guide's check before multimodal traffic: a base64 image in an image_url block."""
    body: JSON = {"model": cfg["model"], "max_tokens": 256, "reasoning_effort": "low",
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": "What colour is this image?"},
                {"type": "image_url",
                 "image_url": {"url": "data:image/png;base64," + PNG_B64}}]}]}
    return call(cfg, "/v1/chat/completions", body, timeout=300)


# The load the cookbook image's first multi-node decode hung on (sgl-project/sglang#39568: 32
# concurrent requests of 8192 prompt tokens; a short request had answered).
DECODE_BATCH, DECODE_PROMPT, DECODE_OUTPUT = 32, 8192, 16


def decode_batch(cfg: Config) -> Answer:
    """That load through the group: 200 when every request answered 200, else the first other
    answer. Each waits `decode_timeout` (past the engine's own watchdog, so a hang reads as the
    engine ending, not as this probe giving up)."""
    words = min(DECODE_PROMPT, int(cfg.get("prompt_limit") or DECODE_PROMPT))
    body: JSON = {"model": cfg["model"], "max_tokens": DECODE_OUTPUT,
            "messages": [{"role": "user", "content": " ".join(["hello"] * words)}]}
    timeout = float(cfg.get("decode_timeout") or 300)
    with pool(DECODE_BATCH, "decode") as threads:
        answers = list(threads.map(
            lambda _: call(cfg, "/v1/chat/completions", body, timeout=timeout),
            range(DECODE_BATCH)))
    failed = [a for a in answers if a.get("status") != 200]
    return failed[0] if failed else {"status": 200, "body": {"answered": len(answers)}}


def version(cfg: Config) -> Answer:
    """The engine's version as it reports it: vLLM /version; SGLang /server_info, or on a
    release from before that name /get_server_info (now a deprecated alias that writes a
    warning on every call: sgl-project/sglang#21463)."""
    for path in ("/version", "/server_info", "/get_server_info"):
        res = call(cfg, path, timeout=30)
        found = res.get("body")
        if res.get("status") == 200 and isinstance(found, dict) and found.get("version"):
            return {"status": 200, "body": {"version": found["version"], "path": path}}
    return res


CHECKS: "dict[str, Callable[[Config], Answer]]" = {
    "version": version,
    # longer than the engine's own wait (node/http_probe.py health_timeout): a busy SGLang
    # answers /health late, 200 or its 503, never silence
    "health": lambda cfg: call(cfg, "/health", timeout=cfg.get("health_timeout", 30)),
    "health_generate": lambda cfg: call(cfg, "/health_generate", timeout=120),
    "models": lambda cfg: call(cfg, "/v1/models", timeout=30),
    "chat": lambda cfg: chat(cfg),
    "tools": lambda cfg: chat(cfg, tools=True),
    "vision": vision,
    "decode_batch": decode_batch,
}


GENERATING = ("chat", "tools", "vision", "decode_batch")  # answered only by a forward step over every rank


def run_checks(cfg: Config) -> "dict[str, Answer]":
    """The quick checks in order, then the generating ones at once. An engine batches
    concurrent requests, so three take about the time of one (on a real 4x8 H100 group a
    256-token answer is tens of seconds); a group stuck in a collective answers none of them,
    so verify waits one timeout, not one per check."""
    names = cfg["checks"]
    if (within := cfg.get("within")) is not None:
        cfg = {**cfg, "until": time.monotonic() + within}
    out = {name: CHECKS[name](cfg) for name in names if name not in GENERATING}
    generating = [name for name in names if name in GENERATING]
    if generating:
        with pool(len(generating), "probe") as threads:
            answers = dict(zip(generating, threads.map(lambda name: CHECKS[name](cfg), generating)))
        out.update(answers)
    return {name: out[name] for name in names}


if __name__ == "__main__":
    print(json.dumps(run_checks(json.load(sys.stdin))))

"""The bench's load: at each concurrency level, that many streams send requests back to back
until the level's time is up; requests still running then are cancelled, so a level never
outlasts its bound. The async `openai` client, one connection per stream."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypedDict

from k3deploy.core.jsonvalue import JSON
from k3deploy.serving import openai_client
from k3deploy.serving.bench_stats import LevelSummary, RequestRecord, level_summary

if TYPE_CHECKING:
    import openai   # imported when the bench starts (`import openai` takes a second)
    from openai.types import ReasoningEffort

PROMPT = "Explain expert parallelism in two sentences."
ERROR_PAUSE_S = 0.2   # a refused request comes back at once; do not spin on it


class BenchOptions(TypedDict):
    seconds: float          # each level's time
    effort: ReasoningEffort
    max_tokens: int


async def _request(client: openai.AsyncOpenAI, model: str, opts: BenchOptions,
                   records: list[RequestRecord]) -> None:
    import openai
    rec = RequestRecord(started=time.monotonic())
    records.append(rec)
    try:
        stream = await client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": PROMPT}], stream=True,
            reasoning_effort=opts["effort"], max_tokens=opts["max_tokens"])
        try:
            async for chunk in stream:
                for choice in chunk.choices:
                    _count(rec, choice.delta.model_dump(exclude_none=True))
        finally:
            await stream.close()
        rec.done = True
    except openai.OpenAIError as err:
        rec.error = f"{type(err).__name__}: {str(err)[:160]}"
        await asyncio.sleep(ERROR_PAUSE_S)


def _count(rec: RequestRecord, delta: dict[str, JSON]) -> None:
    now = time.monotonic()
    if delta.get("reasoning_content") or delta.get("reasoning"):
        rec.token(now, "reasoning")
    elif delta.get("content"):
        rec.token(now, "content")


async def _stream(client: openai.AsyncOpenAI, model: str, opts: BenchOptions,
                  records: list[RequestRecord]) -> None:
    while True:
        await _request(client, model, opts, records)


async def _level(client: openai.AsyncOpenAI, model: str, opts: BenchOptions,
                 concurrency: int) -> LevelSummary:
    records: list[RequestRecord] = []
    started = time.monotonic()
    tasks = [asyncio.create_task(_stream(client, model, opts, records))
             for _ in range(concurrency)]
    await asyncio.wait(tasks, timeout=opts["seconds"])
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return level_summary(records, concurrency, time.monotonic() - started)


async def _all(target: openai_client.Target, levels: list[int], opts: BenchOptions,
               on_level: Callable[[LevelSummary], None]) -> list[LevelSummary]:
    client = openai_client.client(target, timeout=opts["seconds"] + 30, asynchronous=True)
    out: list[LevelSummary] = []
    try:
        for concurrency in levels:
            out.append(await _level(client, target.model, opts, concurrency))
            on_level(out[-1])
    finally:
        await client.close()
    return out


def run(target: openai_client.Target, levels: list[int], *, seconds: float, effort: ReasoningEffort,
        max_tokens: int, on_level: Callable[[LevelSummary], None] = lambda level: None) -> list[LevelSummary]:
    opts: BenchOptions = {"seconds": seconds, "effort": effort, "max_tokens": max_tokens}
    return asyncio.run(_all(target, levels, opts, on_level))

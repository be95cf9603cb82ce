"""The bench's load: at each concurrency level, that many streams send requests back to back
until the level's time is up; requests still running then are cancelled, so a level never
outlasts its bound. The async `openai` client, one connection per stream."""

from __future__ import annotations

import asyncio
import time

from k3deploy.serving import openai_client
from k3deploy.serving.bench_stats import RequestRecord, level_summary

PROMPT = "Explain expert parallelism in two sentences."
ERROR_PAUSE_S = 0.2   # a refused request comes back at once; do not spin on it


async def _request(client, model: str, opts: dict, records: list) -> None:
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


def _count(rec: RequestRecord, delta: dict) -> None:
    now = time.monotonic()
    if delta.get("reasoning_content") or delta.get("reasoning"):
        rec.token(now, "reasoning")
    elif delta.get("content"):
        rec.token(now, "content")


async def _stream(client, model, opts, records) -> None:
    while True:
        await _request(client, model, opts, records)


async def _level(client, model: str, opts: dict, concurrency: int) -> dict:
    records: list[RequestRecord] = []
    started = time.monotonic()
    tasks = [asyncio.create_task(_stream(client, model, opts, records))
             for _ in range(concurrency)]
    await asyncio.wait(tasks, timeout=opts["seconds"])
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return level_summary(records, concurrency, time.monotonic() - started)


async def _all(target, levels: list[int], opts: dict, on_level) -> list[dict]:
    client = openai_client.client(target, timeout=opts["seconds"] + 30, asynchronous=True)
    out = []
    try:
        for concurrency in levels:
            out.append(await _level(client, target.model, opts, concurrency))
            on_level(out[-1])
    finally:
        await client.close()
    return out


def run(target, levels: list[int], *, seconds: float, effort: str, max_tokens: int,
        on_level=lambda level: None) -> list[dict]:
    opts = {"seconds": seconds, "effort": effort, "max_tokens": max_tokens}
    return asyncio.run(_all(target, levels, opts, on_level))

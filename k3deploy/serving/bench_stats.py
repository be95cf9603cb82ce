"""The bench's arithmetic: per-request timings in, the figures per concurrency level out.

Tokens are counted as streamed deltas (SGLang and vLLM send one token per chunk), split into
reasoning and content by the field they arrive in. Pure: no clocks, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TypedDict


@dataclass
class RequestRecord:
    started: float
    first: float | None = None        # first token of either kind (time to first token)
    last: float | None = None
    reasoning: int = 0
    content: int = 0
    done: bool = False
    error: str | None = None
    gaps: list[float] = field(default_factory=list)   # inter-token latencies

    def token(self, now: float, kind: str) -> None:
        if self.first is None:
            self.first = now
        elif self.last is not None:   # always, after a first token
            self.gaps.append(now - self.last)
        self.last = now
        if kind == "reasoning":
            self.reasoning += 1
        else:
            self.content += 1

    @property
    def tokens(self) -> int:
        return self.reasoning + self.content

    def decode_tok_s(self) -> float | None:
        """This stream's decode rate after the first token."""
        if self.first is None or self.last is None or self.tokens < 2 or self.last <= self.first:
            return None
        return (self.tokens - 1) / (self.last - self.first)


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


class Spread(TypedDict):
    p50: float | None
    p99: float | None


class LevelSummary(TypedDict):
    """One concurrency level's figures, as the bench prints them and the certificate keeps them."""
    concurrency: int
    seconds: float
    requests: int
    completed: int
    errors: int
    error_samples: list[str]
    ttft_s: Spread
    itl_s: Spread
    output_tok_s: float
    reasoning_tok_s: float
    content_tok_s: float
    per_stream_decode_tok_s: float | None


def _spread(values: list[float]) -> Spread:
    p50, p99 = percentile(values, 50), percentile(values, 99)
    return {"p50": None if p50 is None else round(p50, 4),
            "p99": None if p99 is None else round(p99, 4)}


def level_summary(records: list[RequestRecord], concurrency: int, window_s: float) -> LevelSummary:
    window = max(window_s, 1e-9)
    ttft = [r.first - r.started for r in records if r.first is not None]
    gaps = [g for r in records for g in r.gaps]
    rates = [x for x in (r.decode_tok_s() for r in records if r.done) if x]
    reasoning = sum(r.reasoning for r in records)
    content = sum(r.content for r in records)
    median = percentile(rates, 50)
    return {"concurrency": concurrency, "seconds": round(window_s, 2),
            "requests": len(records), "completed": sum(r.done for r in records),
            "errors": sum(r.error is not None for r in records),
            "error_samples": sorted({r.error for r in records if r.error})[:3],
            "ttft_s": _spread(ttft), "itl_s": _spread(gaps),
            "output_tok_s": round((reasoning + content) / window, 2),
            "reasoning_tok_s": round(reasoning / window, 2),
            "content_tok_s": round(content / window, 2),
            "per_stream_decode_tok_s": None if median is None else round(median, 2)}


def single_stream_decode(levels: list[LevelSummary]) -> float | None:
    one = next((lv for lv in levels if lv["concurrency"] == 1), None)
    return None if one is None else one["per_stream_decode_tok_s"]

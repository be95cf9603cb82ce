"""The head guard's judgement of a wedged group, from every rank's published progress
(guard_progress.Local.public) and its own probe. Pure functions of what was seen and when (the
head's monotonic clock); standard library only, uploaded beside guard.py.

Wedged: work outstanding (requests running or queued at the head, or the probe unanswered)
and no rank's progress moved (its token counters, or vLLM's KV usage, which every step of a
long prefill moves: guard_progress.py), and no probe answered, for `wedge_seconds`. The ranks
named are the ones whose metrics stopped answering (a stopped process, a scheduler stuck
holding its lock); while one's metrics have failed for less than that, the verdict waits for
it; when every rank still answers, none advancing, every rank is named: from the outside an
NCCL stall looks the same on every member.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:   # its shapes only: the guard hands in what guard_progress made
    from guard_progress import ProbeState, Public
    from guard_record import Doc


class View(TypedDict):
    """One rank's progress on the head's clock."""
    node: str
    rank: int
    tokens: float | None
    kv: float | None
    running: float | None
    queued: float | None
    error: str | None
    changed_at: float
    answered_at: float


class Named(TypedDict):
    node: str
    rank: int


class Verdict(TypedDict):
    stalled_s: float
    ranks: list[Named]
    silent: bool
    seen: list[str]
    probe: str | None


def view(node: str, rank: int, public: Public | None, received_at: float) -> View | None:
    """One rank's progress on the head's clock; None when that rank publishes none."""
    if not public:
        return None
    return {"node": node, "rank": rank, "tokens": public.get("tokens"), "kv": public.get("kv"),
            "running": public.get("running"), "queued": public.get("queued"),
            "error": public.get("error"),
            "changed_at": received_at - float(public.get("still_s") or 0),
            "answered_at": received_at - float(public.get("unanswered_s") or 0)}


def busy(head: View | None) -> bool:
    return head is not None and ((head.get("running") or 0) + (head.get("queued") or 0)) > 0


def last_progress(views: list[View], probe: ProbeState) -> float | None:
    done_at = probe.get("done_at")
    times = [v["changed_at"] for v in views] + ([done_at] if done_at else [])
    return max(times) if times else None


def wants_probe(now: float, views: list[View], probe: ProbeState, every: float) -> bool:
    """Idle (nothing running at the head) and nothing seen to move for `every` seconds."""
    if probe.get("started") is not None or busy(views[0] if views else None):
        return False
    last = last_progress(views, probe)
    return last is None or now - last >= every


def judge(now: float, views: list[View], probe: ProbeState, wedge_seconds: float,
          silent_after: float) -> Verdict | None:
    """The verdict (stalled for how long, which ranks, what was seen) or None."""
    head = views[0] if views and views[0]["rank"] == 0 else None
    outstanding = busy(head) or probe.get("started") is not None
    last = last_progress(views, probe)
    if not outstanding or last is None or now - last < wedge_seconds:
        return None
    silent = [v for v in views if now - v["answered_at"] > silent_after]
    if not silent and any(v.get("error") for v in views):
        # A rank's metrics just stopped answering (the wedge may have come late in the stall):
        # wait, at most silent_after, to name it alone rather than every rank.
        return None
    named = silent or views
    started = probe.get("started")
    return {"stalled_s": round(now - last, 1),
            "ranks": [{"node": v["node"], "rank": v["rank"]} for v in named],
            "silent": bool(silent), "seen": [describe(now, v) for v in views],
            "probe": None if started is None else f"1-token request unanswered for {now - started:.0f}s"}


def verdict_doc(verdict: Verdict) -> Doc:
    """A verdict as the JSON of the incident record (its `wedge`)."""
    return {"stalled_s": verdict["stalled_s"],
            "ranks": [{"node": r["node"], "rank": r["rank"]} for r in verdict["ranks"]],
            "silent": verdict["silent"], "seen": [line for line in verdict["seen"]],
            "probe": verdict["probe"]}


def describe(now: float, v: View) -> str:
    said = (f"metrics unanswered for {now - v['answered_at']:.0f}s ({v['error']})"
            if now - v["answered_at"] > 0.5 and v.get("error") else "metrics answer")
    kv = "" if v.get("kv") is None else f", KV usage {_n(v['kv'])}"
    return (f"rank {v['rank']} ({v['node']}): {said}; tokens {_n(v['tokens'])}{kv} unchanged "
            f"for {now - v['changed_at']:.0f}s, running {_n(v['running'])}, queued "
            f"{_n(v['queued'])}")


def cause_detail(verdict: Verdict) -> str:
    names = ", ".join(f"rank {r['rank']} ({r['node']})" for r in verdict["ranks"])
    how = "stopped answering its metrics" if verdict["silent"] else \
        "answer their metrics but none advances"
    work = verdict["probe"] or "requests outstanding"
    return (f"no rank advanced for {verdict['stalled_s']:.0f}s with work outstanding ({work}); "
            f"{names} {how}")


def _n(value: float | None) -> str:
    return "?" if value is None else f"{value:g}"

"""Is the group still making progress? The guard's view of a wedged group: every process
alive, the serving port accepting, nothing advancing (NCCL stalled, a rank stopped). Standard
library only; uploaded beside guard.py.

Each guard reads its own engine's Prometheus /metrics (the names are the engines' own: SGLang's
python/sglang/srt/metrics/collector.py, vLLM's vllm/v1/metrics/loggers.py) and publishes what it
saw to the other guards. The head's guard judges: work outstanding (requests running or queued,
or its own 1-token probe unanswered) and no rank's token counter moving for `wedge_seconds`.
When the endpoint is idle nothing would move anyway, so the head asks a 1-token request now
and then; its answer is progress too. A long prefill that advances moves the counters: busy is
not wedged.

vLLM counts a prompt's tokens only in the step that finishes its prefill (0.33.0
v1/core/sched/scheduler.py: no EngineCoreOutput for a middle chunk; v1/engine/async_llm.py:
no IterationStats for a step without outputs), so during one long prefill on a quiet server
its token counters stand still for the whole prefill. What moves is what the scheduler sends
after every step: `vllm:kv_cache_usage_perc` (SchedulerStats.kv_cache_usage, the share of KV
blocks held) grows with each chunk, whose blocks are allocated when it is scheduled. A step
completes, or nothing moves: a group stuck in a collective sends no stats at all.
"""
from __future__ import annotations

import http.client
import json
import threading
import time
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from guard_record import JSON, Doc

RUNNING = ("sglang:num_running_reqs", "vllm:num_requests_running")
QUEUED = ("sglang:num_queue_reqs", "vllm:num_requests_waiting")
# SGLang's scheduler counter first (updated each log interval, prefill chunks included); the
# per-request counters of older SGLang and of vLLM otherwise.
TOKENS = (("sglang:realtime_tokens_total",),
          ("sglang:prompt_tokens_total", "sglang:generation_tokens_total"),
          ("vllm:prompt_tokens_total", "vllm:generation_tokens_total"))
# The share of the KV cache held, set after every scheduler step (older vLLM: gpu_cache_usage).
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
SAMPLE_TIMEOUT = 2.0


class Metrics(TypedDict):
    """What parse_metrics reads of an engine's /metrics (None: the engine has no such series)."""
    running: float | None
    queued: float | None
    tokens: float | None
    kv: float | None


class Seen(Metrics):
    """The last sample, on this node's monotonic clock."""
    error: str | None
    answered_at: float
    changed_at: float


class Public(TypedDict):
    """What the other guards see of a node's progress (Local.public): ages, not times."""
    tokens: float | None
    kv: float | None
    running: float | None
    queued: float | None
    error: str | None
    unanswered_s: float
    still_s: float


class ProbeState(TypedDict):
    """The head's 1-token request (Probe.state): under way since, last answered at, why not."""
    started: float | None
    done_at: float | None
    error: str | None


def parse_metrics(text: str) -> Metrics:
    """Token counters summed over every series (any rank moving moves the sum); the request
    gauges as their largest series (every TP rank reports the same batch; only > 0 matters)."""
    sums: dict[str, float] = {}
    peaks: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "{" in line:
            name, rest = line[:line.index("{")], line[line.rindex("}") + 1:].split()
        else:
            name, *rest = line.split()
        try:
            value = float(rest[0])
        except (IndexError, ValueError):
            continue
        sums[name] = sums.get(name, 0.0) + value
        peaks[name] = max(peaks.get(name, value), value)
    tokens = next((sum(sums[n] for n in names) for names in TOKENS
                   if all(n in sums for n in names)), None)
    return {"running": _first(peaks, RUNNING), "queued": _first(peaks, QUEUED), "tokens": tokens,
            "kv": _first(sums, KV_USAGE)}


def _first(sums: dict[str, float], names: tuple[str, ...]) -> float | None:
    return next((sums[n] for n in names if n in sums), None)


def get(port: int, method: str, path: str, body: bytes | None = None,
        headers: dict[str, str] | None = None, timeout: float = SAMPLE_TIMEOUT) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


class Local:
    """This node's engine metrics, sampled every `every` seconds in a thread of its own
    (a stopped engine makes each sample wait for its timeout)."""

    def __init__(self, port: int, every: float):
        self.port, self.every = port, every
        self.lock = threading.Lock()
        now = time.monotonic()
        self.seen: Seen = {"tokens": None, "kv": None, "running": None, "queued": None,
                     "error": None, "answered_at": now, "changed_at": now}

    def sample(self) -> None:
        try:
            status, body = get(self.port, "GET", "/metrics")
            found = parse_metrics(body.decode(errors="replace")) if status == 200 else None
            error = None if status == 200 else f"HTTP {status}"
        except (OSError, http.client.HTTPException) as err:
            found, error = None, str(err) or type(err).__name__
        now = time.monotonic()
        with self.lock:
            if found is None:
                self.seen["error"] = error
                return
            moved = (found["tokens"], found["kv"]) != (self.seen["tokens"], self.seen["kv"])
            self.seen = {**found, "error": None, "answered_at": now,
                         "changed_at": now if moved else self.seen["changed_at"]}

    def run(self) -> None:
        while True:
            self.sample()
            time.sleep(self.every)

    def public(self) -> Public:
        """What the other guards see: ages, not times (each node has its own monotonic clock)."""
        now = time.monotonic()
        with self.lock:
            seen = self.seen.copy()
        return {"tokens": seen["tokens"], "kv": seen["kv"], "running": seen["running"],
                "queued": seen["queued"],
                "error": seen["error"], "unanswered_s": round(now - seen["answered_at"], 1),
                "still_s": round(now - seen["changed_at"], 1)}


def public_doc(public: Public) -> Doc:
    """What Local.public returned, as the JSON the guard publishes."""
    return {"tokens": public["tokens"], "kv": public["kv"], "running": public["running"],
            "queued": public["queued"], "error": public["error"],
            "unanswered_s": public["unanswered_s"], "still_s": public["still_s"]}


def public_from(doc: JSON) -> Public | None:
    """A peer's published progress (public_doc) read back: None when it publishes none; a key
    it lacks reads as None (its ages as 0)."""
    if not isinstance(doc, dict) or not doc:
        return None
    error = doc.get("error")
    return {"tokens": _number(doc.get("tokens")), "kv": _number(doc.get("kv")),
            "running": _number(doc.get("running")), "queued": _number(doc.get("queued")),
            "error": error if isinstance(error, str) else None,
            "unanswered_s": _number(doc.get("unanswered_s")) or 0,
            "still_s": _number(doc.get("still_s")) or 0}


def _number(value: JSON) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def read_api_key(path: str | None) -> str | None:
    """`api-key: KEY` (SGLang's --config yaml) or `VLLM_API_KEY=KEY` (vLLM's env file)."""
    try:
        with open(path or "", encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    for line in lines:
        key, _, value = line.replace("=", ":", 1).partition(":")
        if key.strip().lower() in ("api-key", "vllm_api_key") and value.strip():
            return value.strip().strip("'\"")
    return None


class Probe:
    """The head's 1-token request when nothing else shows the group works."""

    def __init__(self, port: int, model: str, key: str | None, deadline: float):
        self.port, self.model, self.key, self.deadline = port, model, key, deadline
        self.lock = threading.Lock()
        self.started: float | None = None
        self.done_at: float | None = None
        self.error: str | None = None

    def start(self) -> None:
        with self.lock:
            if self.started is not None:
                return
            self.started = time.monotonic()
        threading.Thread(target=self._ask, daemon=True).start()

    def _ask(self) -> None:
        body = json.dumps({"model": self.model, "max_tokens": 1, "stream": False,
                           "messages": [{"role": "user", "content": "k3deploy guard probe"}]})
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        try:
            status, _ = get(self.port, "POST", "/v1/chat/completions", body.encode(), headers,
                            timeout=self.deadline)
            error = None if status == 200 else f"HTTP {status}"
        except (OSError, http.client.HTTPException) as err:
            error = str(err) or type(err).__name__
        with self.lock:
            self.started, self.error = None, error
            if error is None:
                self.done_at = time.monotonic()

    def state(self) -> ProbeState:
        with self.lock:
            return {"started": self.started, "done_at": self.done_at, "error": self.error}

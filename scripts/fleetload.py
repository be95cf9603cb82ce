"""A steady client load through an OpenAI-compatible endpoint, and a sampler of a router's worker
list: what a fleet's roll or kill is measured with (tests/integration/test_fleet_roll.py,
`scripts/bench --fleet`). Standard library only, nothing of k3deploy: it is a client.

    load = Load(base="http://10.0.0.1:30000", key=KEY, model="moonshotai/Kimi-K3", clients=4)
    sampler = Sampler(base="http://10.0.0.1:30000", admin_key=ADMIN)
    with load, sampler:
        ...                      # the roll
    load.failed(), load.served_between(t0, t1), sampler.samples

Every client sends one request after the other, streaming and not in turn; a request fails on
any HTTP error, a broken or unfinished stream, or an answer without content. The client never
retries (a failure is what is measured); the router may, and its own count of retries is in its
metrics (`retries()`: SMG's smg_worker_retries_total, smg-project/smg@f8daa883
model_gateway/src/observability/metrics.rs record_worker_retry).
"""
from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

PROMPT = "Count from one to five."


@dataclass(frozen=True)
class Request:
    client: int
    stream: bool
    started: float     # time.time()
    ended: float
    error: str | None  # None: answered in full


def _headers(key: str | None) -> dict[str, str]:
    return {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}


def chat_once(base: str, key: str | None, model: str, stream: bool, max_tokens: int = 16,
              timeout: float = 120.0) -> str | None:
    """One chat completion through base (no /v1); None when answered in full, else why not."""
    body = {"model": model, "max_tokens": max_tokens, "stream": stream, "reasoning_effort": "low",
            "messages": [{"role": "user", "content": PROMPT}]}
    req = urllib.request.Request(base.rstrip("/") + "/v1/chat/completions", method="POST",
                                 data=json.dumps(body).encode(), headers=_headers(key))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return _read_stream(resp) if stream else _read_whole(resp.read())
    except urllib.error.HTTPError as e:
        return f"HTTP {e.code}: {e.read()[:200]!r}"
    except (urllib.error.URLError, OSError, ValueError) as e:
        return f"{type(e).__name__}: {e}"


def _read_whole(raw: bytes) -> str | None:
    choices = json.loads(raw).get("choices") or [{}]
    message = choices[0].get("message") or {}
    return None if message.get("content") or message.get("reasoning_content") else \
        f"an answer without content: {raw[:200]!r}"


def _read_stream(resp) -> str | None:
    text, done = "", False
    for line in resp:
        line = line.decode(errors="replace").strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            done = True
            break
        delta = (json.loads(data).get("choices") or [{}])[0].get("delta") or {}
        text += (delta.get("content") or "") + (delta.get("reasoning_content") or "")
    if not done:
        return f"the stream ended before [DONE] ({len(text)} characters in)"
    return None if text else "a stream without content"


@dataclass
class Load:
    base: str
    key: str | None
    model: str
    clients: int = 4
    max_tokens: int = 16
    pause: float = 0.0
    requests: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._client, args=(i,), daemon=True)
                         for i in range(self.clients)]

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def stop(self, within: float = 180.0) -> None:
        """Let every request in flight finish (each is bounded by its own timeout)."""
        self._stop.set()
        for t in self._threads:
            t.join(within)

    def _client(self, index: int) -> None:
        n = 0
        while not self._stop.is_set():
            stream = (n + index) % 2 == 0
            started = time.time()
            error = chat_once(self.base, self.key, self.model, stream, self.max_tokens)
            with self._lock:
                self.requests.append(Request(index, stream, started, time.time(), error))
            n += 1
            if self.pause:
                self._stop.wait(self.pause)

    def done(self) -> list[Request]:
        with self._lock:
            return list(self.requests)

    def failed(self) -> list[Request]:
        return [r for r in self.done() if r.error is not None]

    def served_between(self, start: float, end: float) -> int:
        """Requests sent within [start, end] and answered in full (when a group is out of the
        router for that span, the other groups answered them)."""
        return sum(1 for r in self.done() if r.error is None and start <= r.started <= end)


@dataclass(frozen=True)
class Sample:
    t: float
    status: dict[str, str]   # worker url -> its status; {} when the router did not answer
    error: str | None = None


@dataclass
class Sampler:
    """GET /workers every `every` seconds with the router's admin key."""
    base: str
    admin_key: str
    every: float = 1.0
    samples: list[Sample] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(self.sample())
            self._stop.wait(self.every)

    def sample(self) -> Sample:
        req = urllib.request.Request(self.base.rstrip("/") + "/workers", headers=_headers(self.admin_key))
        now = time.time()
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                workers = json.loads(resp.read()).get("workers") or []
        except (urllib.error.URLError, OSError, ValueError) as e:
            return Sample(now, {}, f"{type(e).__name__}: {e}")
        return Sample(now, {w["url"].rstrip("/"): w.get("status", "") for w in workers})

    def out_windows(self, url: str) -> list[tuple[float, float]]:
        """The spans of consecutive samples in which `url` was not ready."""
        spans: list[tuple[float, float]] = []
        start = None
        for s in self.samples:
            ready = s.status.get(url.rstrip("/")) == "ready"
            if not ready and start is None:
                start = s.t
            elif ready and start is not None:
                spans.append((start, s.t))
                start = None
        if start is not None:
            spans.append((start, self.samples[-1].t))
        return spans


def retries(metrics_base: str) -> float | None:
    """SMG's smg_worker_retries_total summed over its labels, from its Prometheus port; None
    when it does not answer."""
    try:
        with urllib.request.urlopen(metrics_base.rstrip("/") + "/metrics", timeout=10) as resp:
            text = resp.read().decode(errors="replace")
    except (urllib.error.URLError, OSError):
        return None
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("smg_worker_retries_total"))

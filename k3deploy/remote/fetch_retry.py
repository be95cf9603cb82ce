"""When the downloader may send its next request: the Hub's rate-limit and Retry-After answers
(per host, shared by every connection) and a backoff for errors that say nothing.

The Hub answers 429 with `RateLimit: "resolvers";r=<left>;t=<seconds to reset>` and
`RateLimit-Policy: "fixed window";"resolvers";q=<quota>;w=300` (hub-docs
docs/hub/rate-limits.md); huggingface_hub parses them with the regex copied below
(src/huggingface_hub/utils/_http.py `_RATELIMIT_REGEX`, `parse_ratelimit_headers`,
huggingface/huggingface_hub@ee0a4510f4bc15e26cb722be2efc2bdb01383ca0) and sleeps `t + 1`
(`_http_backoff_base`: "+1s to avoid rounding issues"), else a numeric or HTTP-date
`Retry-After` (`_parse_retry_after`). Unlike huggingface_hub, the wait holds for every
connection to that host, not only the one that was told: 32 connections each finding out by
themselves would be 32 requests into a closed window.
"""
from __future__ import annotations

import email.utils
import random
import re
import threading
import time

RATELIMIT = re.compile(r"\"(?P<resource_type>\w+)\"\s*;\s*r\s*=\s*(?P<r>\d+)\s*;\s*t\s*=\s*(?P<t>\d+)")
BACKOFF_FIRST, BACKOFF_CAP = 0.5, 30.0
CONN_BACKOFF_CAP = 8.0   # one connection's own backoff after transport errors


class Transient(Exception):
    """A failure that another request may not have: retried within the time budget."""


def told_wait(status: int, headers) -> float | None:
    """Seconds the answer says to wait before the next request, or None when it says nothing."""
    if status == 429:
        match = RATELIMIT.search(headers.get("RateLimit") or "")
        if match:
            return int(match.group("t")) + 1.0
    return retry_after(headers.get("Retry-After"))


def retry_after(value: str | None) -> float | None:
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class Gate:
    """Per host: no request before the time the host last named; failures back off together."""

    def __init__(self, stop_event: threading.Event):
        self.stop_event, self.lock = stop_event, threading.Lock()
        self.not_before: dict[str, float] = {}
        self.streak: dict[str, int] = {}

    def hold(self, host: str, seconds: float) -> None:
        with self.lock:
            until = time.monotonic() + seconds
            self.not_before[host] = max(self.not_before.get(host, 0.0), until)

    def failed(self, host: str, told: float | None) -> float:
        """Record a failure; returns the wait it imposes on the host. Failures seen while the
        host is already held (every connection finding the same outage) count once."""
        with self.lock:
            held = self.not_before.get(host, 0.0) > time.monotonic()
            self.streak[host] = n = self.streak.get(host, 0) + (0 if held else 1)
        delay = told if told is not None else min(BACKOFF_CAP, BACKOFF_FIRST * 2 ** (n - 1))
        # Jitter only lengthens a wait: never a request before the time a host named.
        self.hold(host, delay * (1 + 0.2 * random.random()) if told is None else delay)
        return delay

    def ok(self, host: str) -> None:
        with self.lock:
            self.streak.pop(host, None)

    def wait(self, host: str) -> bool:
        """Sleep until the host may be asked; False when the run is being stopped."""
        while True:
            with self.lock:
                left = self.not_before.get(host, 0.0) - time.monotonic()
            if left <= 0:
                return True
            if self.stop_event.wait(min(left, 1.0)):
                return False

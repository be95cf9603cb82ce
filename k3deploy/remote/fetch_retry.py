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
from collections.abc import Callable
from typing import Protocol

RATELIMIT = re.compile(r"\"(?P<resource_type>\w+)\"\s*;\s*r\s*=\s*(?P<r>\d+)\s*;\s*t\s*=\s*(?P<t>\d+)")
BACKOFF_FIRST, BACKOFF_CAP = 0.5, 30.0
CONN_BACKOFF_CAP = 8.0   # one connection's own backoff after transport errors
POLL = 0.25              # s: how often a held request looks at the stop event


class Transient(Exception):
    """A failure that another request may not have: retried within the time budget."""


class Headers(Protocol):
    """A response's headers, case-insensitive: http.client's HTTPMessage (fetch_http.Answer)
    or httpx's Headers (huggingface_hub's client)."""
    def get(self, key: str, /) -> str | None: ...


def told_wait(status: int, headers: Headers) -> float | None:
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


class Ticket:
    """Leave to send one request to a host; its answer goes back with Gate.ok/failed/lost."""

    def __init__(self, host: str, probe: bool, at: float):
        self.host, self.probe, self.at = host, probe, at


class Gate:
    """Per host: no request before the time the host last named, and while a host is failing
    one request at a time. After each backoff one connection probes; the others wait for its
    answer and all go on once it succeeds, or wait out the next backoff once it fails (the
    half-open state of a circuit breaker, the one probe a CDN's politeness asks for). Without
    it, every connection held by the backoff asked at its end: ~19 Hub and 13 CDN requests
    per round of a 503 outage (scripts/bench --hub-faults probe).

    A request that got no answer at all (refused, reset, timed out before the status line) may
    be its connection's own bad luck: one edge of many, a stale pooled socket. The first such
    loss only makes the host suspect (the connection backs off by itself); a second one before
    any later request was answered is the host's failure: one reset must not pause every
    connection to the CDN for a backoff and then let them through one probe at a time."""

    def __init__(self, stop_event: threading.Event, clock: Callable[[], float] = time.monotonic):
        self.stop_event, self.clock, self.cond = stop_event, clock, threading.Condition()
        self.not_before: dict[str, float] = {}
        self.streak: dict[str, int] = {}
        self.failing: set[str] = set()
        self.probing: set[str] = set()   # hosts whose probe is under way
        self.suspect: dict[str, float] = {}  # host -> when a request to it got no answer

    def wait(self, host: str) -> Ticket | None:
        """Block until a request to the host may go; None when the run is being stopped."""
        with self.cond:
            while not self.stop_event.is_set():
                left = self.not_before.get(host, 0.0) - self.clock()
                if left <= 0 and host not in self.failing:
                    return Ticket(host, False, self.clock())
                if left <= 0 and host not in self.probing:
                    self.probing.add(host)
                    return Ticket(host, True, self.clock())
                # the stop event is not a condition: look at it at least every POLL seconds
                self.cond.wait(min(left, POLL) if left > 0 else POLL)
        return None

    def failed(self, ticket: Ticket, told: float | None) -> float:
        """Record a failure; returns the wait it imposes on the host. Failures of requests sent
        before the host was seen failing (every connection finding the same outage) count once."""
        host = ticket.host
        with self.cond:
            counts = ticket.probe or host not in self.failing
            self.probing.discard(host)  # only the probe's own failure ends a probe
            self.suspect.pop(host, None)
            self.failing.add(host)
            self.streak[host] = n = self.streak.get(host, 0) + (1 if counts else 0)
            delay = told if told is not None else min(BACKOFF_CAP, BACKOFF_FIRST * 2 ** (n - 1))
            # Jitter only lengthens a wait: never a request before the time a host named.
            until = self.clock() + (delay * (1 + 0.2 * random.random()) if told is None else delay)
            self.not_before[host] = max(self.not_before.get(host, 0.0), until)
            self.cond.notify_all()
        return delay

    def lost(self, ticket: Ticket) -> float | None:
        """A request that got no answer at all: the host's failure (see `failed`) when it was
        the probe, when the host is already failing or suspect; else only suspect (None)."""
        with self.cond:   # an RLock: `failed` takes it again, with no gap between the two
            host = ticket.host
            if not ticket.probe and host not in self.failing and host not in self.suspect:
                self.suspect[host] = self.clock()
                return None
            return self.failed(ticket, None)

    def ok(self, ticket: Ticket) -> None:
        """An answer that is not a failure. While the host is failing only the probe's counts: a
        request sent before the failure says nothing of the host now."""
        host = ticket.host
        with self.cond:
            if ticket.at >= self.suspect.get(host, ticket.at):
                self.suspect.pop(host, None)   # answered after the loss: the host is alive
            if ticket.probe or host not in self.failing:
                self.probing.discard(host)
                self.failing.discard(host)
                self.streak.pop(host, None)
            self.cond.notify_all()

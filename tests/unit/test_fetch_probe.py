"""After an outage's backoff one connection probes the host; the others wait for its answer
(remote/fetch_retry.py Gate, through fetch_hub.HubSource._get as the downloader calls it).

A fake server that answers 503 for OUTAGE seconds, backoffs scaled down 10x (0.05 s first,
0.2 s cap: the real wall clock, as a sped-up clock would desynchronise the waits and hide the
herd), 16 connections retrying as the downloader's do: one request per round, not one per
connection at the end of every backoff."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import pytest

import k3deploy.remote.fetch_weights  # noqa: F401  (puts the downloader's modules on sys.path)
import fetch_hub  # noqa: E402
import fetch_retry  # noqa: E402

CONNECTIONS, OUTAGE, FIRST = 16, 1.5, 0.05
ROUND_TRIP = 0.01  # s: an answer is not instant, so connections woken together all send


class Clock:
    def __init__(self):
        self.began = time.monotonic()

    def __call__(self) -> float:
        return time.monotonic() - self.began


class Response:
    def __init__(self, status: int):
        self.status_code, self.headers = status, {}

    def read(self) -> bytes:
        return b""


class OutageServer:
    """Answers 503 until OUTAGE (fake) seconds, then 200; logs (fake time, status) per request.
    The first CONNECTIONS requests are answered together, as when an outage meets every
    connection under way."""

    def __init__(self, clock, refuse: bool = False):
        self.clock, self.refuse, self.log, self.lock = clock, refuse, [], threading.Lock()
        self.onset = threading.Barrier(CONNECTIONS)  # the first round: every connection under way
        self.arrived = 0

    @contextmanager
    def stream(self, method, url, headers, follow_redirects):
        # Counted on arrival, not from the log: a refused connection may come back before the
        # rest of the first round has logged, and must not wait for a second round of 16.
        with self.lock:
            self.arrived += 1
            first_round = self.arrived <= CONNECTIONS
        if first_round:
            self.onset.wait(timeout=10)
        now = self.clock()
        status = 503 if now < OUTAGE else 200
        with self.lock:
            self.log.append((now, status))
        time.sleep(ROUND_TRIP)
        if status == 503 and self.refuse:
            raise OSError("connection refused")
        yield Response(status)


def source(gate) -> fetch_hub.HubSource:
    src = fetch_hub.HubSource.__new__(fetch_hub.HubSource)  # no huggingface_hub session needed
    src.gate = gate
    return src


def connection(src, server, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            with src._get(server, "https://cdn.example/blob", {}) as response:
                assert response.status_code == 200
                return
        except (fetch_retry.Transient, OSError):
            stop.wait(0.001)  # the worker's own backoff is not what holds the others


@pytest.fixture(autouse=True)
def short_backoffs(monkeypatch):
    monkeypatch.setattr(fetch_retry, "BACKOFF_FIRST", FIRST)
    monkeypatch.setattr(fetch_retry, "BACKOFF_CAP", 4 * FIRST)


def run_outage(refuse: bool = False) -> list[tuple[float, int]]:
    clock, stop = Clock(), threading.Event()
    server, gate = OutageServer(clock, refuse), fetch_retry.Gate(stop)
    threads = [threading.Thread(target=connection, args=(source(gate), server, stop)) for _ in range(CONNECTIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    stop.set()
    assert not any(t.is_alive() for t in threads), "a connection never got through after the outage"
    return sorted(server.log)


def test_one_probe_per_backoff_round_then_all_resume():
    log = run_outage()
    failed = [at for at, status in log if status == 503]
    # The first round is every connection at once (none knew yet); each later one is one probe,
    # a backoff (>= FIRST) after the last. Before: 16 requests at the end of every backoff.
    later = failed[CONNECTIONS:]
    assert 3 <= len(later) <= OUTAGE / FIRST, f"{len(later)} requests after the first round: {later}"
    gaps = [b - a for a, b in zip(later, later[1:])]
    assert min(gaps) >= FIRST * 0.99, f"more than one request in a backoff round: {gaps}"
    succeeded = [at for at, status in log if status == 200]
    assert len(succeeded) == CONNECTIONS  # the probe's success let every connection go on at once
    assert succeeded[-1] - succeeded[0] < 2 * FIRST


def test_a_probe_that_gets_no_answer_counts_as_a_failure():
    log = run_outage(refuse=True)  # refused connections: no status line, yet no deadlock or herd
    later = [at for at, status in log if status == 503][CONNECTIONS:]
    assert later and min(b - a for a, b in zip(later, later[1:])) >= FIRST * 0.99
    assert sum(status == 200 for _, status in log) == CONNECTIONS


def test_a_request_sent_before_the_failure_does_not_close_the_circuit():
    gate = fetch_retry.Gate(threading.Event(), clock=lambda: 0.0)
    early, late = gate.wait("hub"), gate.wait("hub")
    gate.failed(late, None)
    gate.ok(early)  # its answer left before the outage: says nothing of the host now
    assert "hub" in gate.failing
    gate.not_before["hub"] = 0.0
    probe = gate.wait("hub")
    assert probe.probe and "hub" in gate.probing
    gate.ok(probe)
    assert not gate.failing and not gate.probing and not gate.wait("hub").probe


class StepClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0   # every reading later than the one before: the order of events
        return self.now


def test_one_request_without_an_answer_holds_back_no_other_connection():
    """A reset or refused connection may be its own bad luck (one edge of many, a stale pooled
    socket): the host only becomes suspect, and the next request goes at once, no probe."""
    gate = fetch_retry.Gate(threading.Event(), clock=StepClock())
    assert gate.lost(gate.wait("cdn")) is None
    after = gate.wait("cdn")
    assert not after.probe and "cdn" not in gate.failing and "cdn" not in gate.not_before


def test_a_second_loss_before_any_later_answer_fails_the_host():
    gate = fetch_retry.Gate(threading.Event(), clock=StepClock())
    early, first, second = gate.wait("cdn"), gate.wait("cdn"), gate.wait("cdn")
    assert gate.lost(first) is None
    gate.ok(early)   # sent before the loss: says nothing of the host since
    assert gate.lost(second) == fetch_retry.BACKOFF_FIRST
    assert "cdn" in gate.failing and gate.not_before["cdn"] > 0


def test_an_answer_after_the_loss_clears_the_suspicion():
    gate = fetch_retry.Gate(threading.Event(), clock=StepClock())
    gate.lost(gate.wait("cdn"))
    gate.ok(gate.wait("cdn"))
    assert gate.lost(gate.wait("cdn")) is None and "cdn" not in gate.failing


def test_a_probe_without_an_answer_is_a_failure_at_once():
    gate = fetch_retry.Gate(threading.Event(), clock=StepClock())
    gate.failed(gate.wait("cdn"), None)
    gate.not_before["cdn"] = 0.0
    probe = gate.wait("cdn")
    assert probe.probe and gate.lost(probe) == 2 * fetch_retry.BACKOFF_FIRST

"""Many connections per file: the node's Hub connections, the byte ranges they share, and the
replacement of connections that landed on a slow CDN edge.

The CDN caps each connection at the edge it lands on (huggingface/xet-core#821, 2026-04: ~65-75%
of edges at 8.7 MB/s, the rest ~68 MB/s), so one connection per file leaves most of the link
idle. Here `connections` workers serve every file in flight: a file is cut into segments, the
earliest file's segments go first (files finish in order, the cache holds few partials), an idle
worker splits the largest range still running (so a file's last bytes are not left to one slow
stream), and a worker whose connection runs far below the others' (under SLOW_RATIO of the
fastest busy one, after WARMUP seconds) drops it for a new one, at most `replace_per_second` per
node (each costs a new CDN connection, at times a `/resolve`).

A file fails only when none of its bytes arrived for `retry_seconds` (the inventory's
download.retry_minutes) or on an answer no retry changes (401/403/404 from the Hub, a size that
differs from the manifest): the Hub's bad minutes are waited out. The budget counts the Hub's
silence, never the queue: while every connection is busy with other files, a file waiting for
one is only as silent as the host (no byte for any file), so 16 files of 16 GB behind one
another never fail for waiting, and a Hub that stops answering still fails them all in one
budget.
"""
from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from direct_io import aligned, place
from fetch_base import DownloadError, HubUnavailable, Stopped, log
from fetch_http import Answer, Streamed, body, fill_bytes
from fetch_retry import BACKOFF_FIRST, CONN_BACKOFF_CAP, Transient

if TYPE_CHECKING:   # the Hub source and the files fetch_weights hands in
    from fetch_hub import HubSource, Link
    from fetch_manifest import FileSpec
    from fetch_ranges import PartialBlob

WARMUP = 2.0          # seconds a connection runs before its rate is judged
SEGMENT_MEASURE = 1.0  # seconds a range runs before its own rate decides a takeover
SLOW_RATIO = 0.4
MIN_STEAL = 64 << 10   # a running range is split only when both parts get at least this
STEAL_ETA = 1.0        # ... and only when it would still run longer than this (seconds)
MIN_PIECES = 8
# A file under this is one range, never split: a config or tokenizer gains nothing from more
# connections, and each range in flight when a process dies is bytes the Hub sent for nothing.
MIN_SPLIT_FILE = 1 << 20
# Each connection reads into one buffer of its own, kept across ranges: memory grows with the
# connections by this much each, and no more (32 connections: 32 MiB).
BUFFER = 1 << 20
RATE_EVERY = 0.25   # seconds the fastest connections' rates are reused by every judge


class Replace(Exception):
    pass


class Segment:
    def __init__(self, job: Job, start: int, end: int):
        self.job, self.pos, self.end = job, start, end
        self.conn: Conn | None = None
        self.began: float | None = None
        self.first = start

    def running_on(self, conn: Conn) -> None:
        self.conn, self.began, self.first = conn, time.monotonic(), self.pos

    def own_rate(self) -> float | None:
        """Bytes/s since it started, once it ran SEGMENT_MEASURE seconds: a file's last range
        handed to a new connection on a slow edge is seen as slow within a second, not after
        the connection's WARMUP (at 25 kB/s a 250 kB range is 10 s)."""
        age = time.monotonic() - self.began if self.began is not None else 0.0
        return (self.pos - self.first) / age if age >= SEGMENT_MEASURE else None

    def rate(self) -> float | None:
        """Its own rate, else (too young to tell) its connection's."""
        own = self.own_rate()
        return own if own is not None else self.conn.rate() if self.conn else None

    def eta(self, fallback: float) -> float:
        return (self.end - self.pos) / max(self.rate() or fallback, 1.0)

    def slow(self, fast: float) -> bool:
        """Measured on a slow edge: its tail is taken over whole, however few bytes are left
        (under MIN_STEAL a slow edge still takes seconds: 64 KiB at a 25 kB/s edge, 2.6 s).
        Only by its own rate: a range just taken over is given the time to show its speed."""
        own = self.own_rate()
        return own is not None and own < SLOW_RATIO * fast


class Job:
    """One file being fetched: its segments waiting, and when its last byte arrived."""

    def __init__(self, spec: FileSpec, part: PartialBlob, segment_bytes: int):
        self.spec, self.part, self.f = spec, part, part.open()
        # At least MIN_PIECES ranges per file, so a file under segment_bytes still spreads.
        segment_bytes = max(MIN_STEAL, min(segment_bytes, -(-spec.size // MIN_PIECES)))
        if spec.size < MIN_SPLIT_FILE:
            segment_bytes = max(spec.size, 1)
        self.queue = [Segment(self, s, min(e, s + segment_bytes))
                      for gs, e in part.missing() for s in range(gs, e, segment_bytes)]
        self.running: set[Segment] = set()
        self.last_byte, self.reason = time.monotonic(), "no answer yet"
        self.fatal: DownloadError | None = None
        self.done, self.started = threading.Event(), False
        if not self.queue:
            self.done.set()


class Conn:
    """A worker's current connection: its link and what it has carried, for its rate."""

    def __init__(self, link: Link):
        self.link, self.opened, self.bytes, self.busy = link, time.monotonic(), 0, False
        self.idle, self.idle_since = 0.0, self.opened   # seconds it waited for a range
        self.buffer = aligned(BUFFER)

    def working(self, busy: bool) -> None:
        """A range starts (True) or ends (False) on it: the time between is not its edge's."""
        now = time.monotonic()
        if busy and not self.busy:
            self.idle += now - max(self.idle_since, self.opened)
        elif not busy:
            self.idle_since = now
        self.busy = busy

    def rate(self) -> float | None:
        """Bytes/s over the time it carried a range, once that is WARMUP seconds; None while
        idle. Its waits for a range are not its edge's speed: judged by its age, one that
        waited while the files ahead were verified looked slow and was replaced, and the rest
        of its range, already sent, came again."""
        carried = time.monotonic() - self.opened - self.idle
        return self.bytes / carried if carried >= WARMUP and self.busy else None

    def on_slow_edge(self, fast: float) -> bool:
        """Known slow: it ran WARMUP seconds, idle spells included, well below the fastest."""
        age = time.monotonic() - self.opened
        return age >= WARMUP and self.bytes / age < SLOW_RATIO * fast

    def renew(self) -> None:
        self.link.renew()
        self.opened, self.bytes, self.idle = time.monotonic(), 0, 0.0


class Connections:
    def __init__(self, source: HubSource, count: int, segment_bytes: int, retry_seconds: float,
                 replace_per_second: float, stop_event: threading.Event):
        self.source, self.count, self.segment = source, count, segment_bytes
        self.budget, self.stop_event = retry_seconds, stop_event
        self.replace_gap, self.next_replace = 1.0 / max(replace_per_second, 1e-6), 0.0
        self.jobs: list[Job] = []
        self.conns: dict[int, Conn] = {}
        self.cond = threading.Condition()
        self.threads: list[threading.Thread] = []
        self.replaced = 0
        self.worker_error: str | None = None
        self.reference: float | None = None
        # (fastest conn, its rate, second's)
        self.ranked: tuple[Conn | None, float | None, float | None] = (None, None, None)
        self.ranked_at = -RATE_EVERY
        self.host_byte = time.monotonic()   # when a byte of any file last arrived

    def fetch(self, spec: FileSpec, part: PartialBlob) -> None:
        """Fill `part` to spec.size from the Hub (blocks; many workers write into it)."""
        job = Job(spec, part, self.segment)
        self._start_workers()
        with self.cond:
            self.jobs.append(job)
            self.cond.notify_all()
        try:
            while not job.done.wait(0.25):
                if self.stop_event.is_set():
                    raise Stopped()
                if not any(t.is_alive() for t in self.threads):
                    raise DownloadError(f"{spec.path}: every Hub connection worker died ({self.worker_error})")
                if self._silence(job) > self.budget:
                    raise HubUnavailable(f"{spec.path}: no new byte for {self.budget:.0f}s "
                                        f"(retry budget; last: {job.reason})")
            if job.fatal:
                raise job.fatal
            part.finish(job.f)
        finally:
            with self.cond:
                job.fatal = job.fatal or DownloadError("abandoned")
                job.queue.clear()
                self.jobs.remove(job)
            job.f.close()
            part.save()

    def _silence(self, job: Job) -> float:
        """Seconds the Hub has been silent for `job`: since its last byte, or, while it waits
        for a connection every one of which is busy with another file, since the host's."""
        with self.cond:
            queued = not job.running and len(self.conns) >= self.count and all(
                c.busy for c in self.conns.values())
            if queued:
                job.last_byte = max(job.last_byte, self.host_byte)
        return time.monotonic() - job.last_byte

    def _start_workers(self) -> None:
        with self.cond:
            while len(self.threads) < self.count:
                t = threading.Thread(target=self._work, args=(len(self.threads),), daemon=True,
                                     name=f"conn-{len(self.threads)}")
                self.threads.append(t)
                t.start()

    # -- a worker ----------------------------------------------------------------------
    def _work(self, index: int) -> None:
        try:
            self._serve(index)
        except Exception as e:  # seen by fetch(): a dead pool must fail the run, not hang it
            self.worker_error = f"{type(e).__name__}: {e}"
            log(f"connection worker {index} died: {self.worker_error}")

    def _serve(self, index: int) -> None:
        conn, failures = Conn(self.source.link()), 0
        self.conns[index] = conn
        while not self.stop_event.is_set():
            seg = self._take(conn)
            if seg is None:
                continue
            got = self._run(seg, conn)
            failures = 0 if got else failures + 1
            if failures and self.stop_event.wait(min(CONN_BACKOFF_CAP, BACKOFF_FIRST * 2 ** (failures - 1))):
                break
        conn.link.renew()

    def _take(self, conn: Conn) -> Segment | None:
        with self.cond:
            for job in self.jobs:
                if job.queue and not job.fatal:
                    seg = job.queue.pop(0)
                    job.running.add(seg)
                    if not job.started:  # the budget runs from its first request, not its queueing
                        job.started, job.last_byte = True, time.monotonic()
                    return seg
            stolen = self._steal(conn)
            if stolen is None:
                self.cond.wait(0.5)
            return stolen

    def _steal(self, thief: Conn) -> Segment | None:
        """Split the range that will take longest and can be split: the running connection
        keeps the share its rate earns against the fastest one; a slow edge's last bytes are
        taken over whole (the file's tail would otherwise wait on its slowest stream), though
        not by a thief on a slow edge itself (handing a tail from one slow edge to another only
        restarts it). A longer range that cannot be split yet (too young to show its speed,
        too little left) does not keep the thief from the next one.
        Only a range that showed its own rate is split, and only once a fastest rate is known:
        the victim's request asked for its whole range, so what the sender pushed past the
        new end before the victim hangs up is fetched again by the thief. Judged blind (no
        rate yet: every range looks endless) or by its connection's past, ranges were split
        as they started (5 MB shards, two testbed nodes: 1.10-1.15x the repo from the Hub)."""
        fast = self._fast_rate()
        if fast is None:
            return None
        tails = not thief.on_slow_edge(fast)
        running = [s for j in self.jobs if not j.fatal and j.spec.size >= MIN_SPLIT_FILE for s in j.running
                   if s.own_rate() is not None and s.eta(fast) > STEAL_ETA
                   and (s.end - s.pos >= MIN_STEAL or tails and s.slow(fast))]
        for victim in sorted(running, key=lambda s: s.eta(fast), reverse=True):
            seg = self._split(victim, fast, tails)
            if seg is not None:
                return seg
        return None

    @staticmethod
    def _split(victim: Segment, fast: float, tails: bool) -> Segment | None:
        """The part of `victim` a thief takes (its end moved back to the split), or None."""
        mine = victim.rate() or fast
        left = victim.end - victim.pos
        keep = int(left * mine / (mine + fast))
        # A split costs the victim's bytes in flight past its new end: only worth it for two
        # large parts; a slow edge's tail is else taken whole (little is in flight on it).
        if keep < MIN_STEAL or left - keep < 4 * MIN_STEAL:
            if not (tails and victim.slow(fast)):
                return None
            keep = 0
        mid = victim.pos + keep
        seg, victim.end = Segment(victim.job, mid, victim.end), mid
        victim.job.running.add(seg)
        return seg

    def _run(self, seg: Segment, conn: Conn) -> int:
        job, start = seg.job, seg.pos
        conn.working(True)
        seg.running_on(conn)
        try:
            with self.source.open_range(job.spec, seg.pos, seg.end, conn.link) as response:
                self._copy(seg, conn, response, seg.end)
        except Replace:
            conn.renew()
        except Transient as e:
            job.reason = str(e)
            conn.renew()
        except DownloadError as e:
            job.fatal = e
        except Exception as e:  # a worker thread must not die with its segment unaccounted for
            job.reason = f"{type(e).__name__}: {e}"
            conn.renew()
        finally:
            conn.working(False)
            got = seg.pos - start
            self._settle(seg)
        return got

    def _copy(self, seg: Segment, conn: Conn, response: Answer | Streamed, asked: int) -> None:
        job = seg.job
        skip = seg.pos if response.status_code == 200 else 0  # the range was ignored
        chunks = body(response, conn.buffer, fill_bytes(job.spec.size, BUFFER), lambda: place(seg.pos))
        for chunk in chunks:
            if self.stop_event.is_set() or job.fatal:
                break
            if skip:
                cut = min(skip, len(chunk))
                chunk, skip = chunk[cut:], skip - cut
            take = min(len(chunk), seg.end - seg.pos)
            if take > 0:
                job.part.write_at(job.f, seg.pos, chunk[:take])
                seg.pos, conn.bytes = seg.pos + take, conn.bytes + take
                job.last_byte = self.host_byte = time.monotonic()
            if seg.pos >= seg.end:
                if seg.end == asked and not skip and response.status_code == 206:
                    for _ in chunks:  # the body's end: the connection stays open for the next range
                        pass
                return
            self._judge(conn)
        if seg.pos < seg.end and not job.fatal and not self.stop_event.is_set():
            raise Transient(f"the response ended at byte {seg.pos}")

    def _fast_rate(self, but: Conn | None = None) -> float | None:
        """The fastest busy connection's rate but `but`'s (the speed a new connection may land
        on), else the last one seen. Under a full link every connection gets about its share, so
        none is far below the fastest; on a slow edge one is (1:8 in xet-core#821). The two
        fastest are looked up at most every RATE_EVERY seconds, not per chunk: a look over 256
        connections costs tens of microseconds, per MiB read that is a share of a core."""
        now = time.monotonic()
        if now - self.ranked_at >= RATE_EVERY:
            rates = sorted(((r, c) for c in list(self.conns.values()) if (r := c.rate())),
                           key=lambda rc: rc[0], reverse=True)
            self.ranked = (rates[0][1] if rates else None, rates[0][0] if rates else None,
                           rates[1][0] if len(rates) > 1 else None)
            self.ranked_at = now
        first, rate, second = self.ranked
        other = second if first is but and but is not None else rate
        if other:
            self.reference = other
        return self.reference

    def _judge(self, conn: Conn) -> None:
        mine = conn.rate()
        fast = self._fast_rate(conn) if mine is not None else None
        if mine is None or fast is None:
            return
        now = time.monotonic()
        if mine < SLOW_RATIO * fast:
            with self.cond:
                if now < self.next_replace:
                    return
                self.next_replace, self.replaced = now + self.replace_gap, self.replaced + 1
            log(f"connection at {mine / 1e6:.3f} MB/s against {fast / 1e6:.3f} MB/s for the fastest: "
                "replaced by a new one")
            raise Replace()

    def _settle(self, seg: Segment) -> None:
        job = seg.job
        # Record and hash before the job can be done: once it is, fetch() returns, the file is
        # renamed and its record removed, and a save or a hash after that would write the
        # record again (a leftover) or open a file no longer there.
        try:
            if seg.pos >= seg.end:  # a finished range goes into the record now, not at the next tick
                job.part.save()
            job.part.advance_hash()
        except DownloadError as e:   # a DiskFault: the file fails now, the worker lives on
            job.fatal = job.fatal or e
        with self.cond:
            job.running.discard(seg)
            if seg.pos < seg.end and not job.fatal:
                job.queue.insert(0, Segment(job, seg.pos, seg.end))
            if job.fatal or (not job.queue and not job.running):
                job.done.set()
            self.cond.notify_all()


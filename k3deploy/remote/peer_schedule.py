"""fetch_weights' schedule with fan-out: every file through `ensure`, the Hub's and the peers'
files in pools of their own, so waiting for a peer never holds up this node's own Hub share.

A file no peer has yet (peer_fetch.NotYet) is asked again after RECHECK seconds, or at once
when a peer's index newly lists it verified (its owner just finished it: on an 8-node testbed
the median delay from an owner's verify to another node's went from 0.88-0.97 s in three runs
to 0.59-0.76 s in five, and the cluster's last file waits on it); one no peer will have
(peer_fetch.UseHub) goes to the Hub. Standard library only; uploaded beside fetch_weights.py
(protocol.DOWNLOADER_FILES).
"""
from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable

from fetch_manifest import FileSpec
from peer_fetch import NotYet, Peers, UseHub
from thread_pool import pool

RECHECK = 0.5        # seconds before a file no peer has yet is looked at again
TICK = 0.1           # seconds between looks at finished work and news


def schedule(peers: Peers, files: list[FileSpec], ensure: Callable[[FileSpec, bool], None],
             workers: int, describe: Callable[[FileSpec, BaseException], str | None]) -> list[str]:
    """Run ensure(spec, via_peers) for every file; the errors `describe` names."""
    errors: list[str] = []
    later: list[tuple[float, FileSpec]] = []
    pending: dict[concurrent.futures.Future[None], FileSpec] = {}
    with pool(workers, "hub") as hub, pool(workers, "peer") as lan:
        def submit(spec: FileSpec, via_peers: bool) -> None:
            # This node's own share stays in the Hub pool, asked of the peers first.
            workers_for = lan if via_peers and not peers.owns(spec) else hub
            pending[workers_for.submit(ensure, spec, via_peers)] = spec
        for spec in files:
            submit(spec, peers.wants(spec))
        while pending or (later and not peers.stop_event.is_set()):
            now = time.monotonic()
            for item in due(later, now, peers.take_news()):
                later.remove(item)
                submit(item[1], True)
            if not pending:
                peers.stop_event.wait(TICK)
                continue
            done, _ = concurrent.futures.wait(pending, timeout=TICK,
                                              return_when=concurrent.futures.FIRST_COMPLETED)
            for future in done:
                spec, error = pending.pop(future), future.exception()
                if isinstance(error, NotYet):
                    later.append((now + RECHECK, spec))
                elif isinstance(error, UseHub):
                    peers.log(f"{spec.path}: from the Hub: {error}")
                    submit(spec, False)
                elif error is not None and (said := describe(spec, error)):
                    errors.append(said)
    return errors


def due(later: list[tuple[float, FileSpec]], now: float, news: set[str]) -> list[tuple[float, FileSpec]]:
    """The waiting (time, spec) to ask again now: their recheck time came, or a peer's index
    newly lists them verified."""
    return [x for x in later if x[0] <= now or x[1].etag in news]

"""Every SSH call a step's apply makes, and the record of what ran.

Steps plan and decide; the executor runs what they ask for: a command, a run of uploads in one
round trip, a look at the step's facts, or a wait (handed to the runner's one poll loop,
run/waiter.py). Each action that carries a `tag` is recorded in the run's ledger
(node/run_ledger.py) as it returns, so what a step learns from its own actions (when this
run started a downloader, which incident it archived) is read from there, never written by
the step.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from k3deploy.node import facts as F


class Executor:
    def __init__(self, waiter: Callable | None = None):
        # (step, node, Wait) -> the facts the wait ended on; set by the runner.
        self.waiter = waiter
        # (step label, node) -> the facts a wait ended on, while nothing has run on the node
        # since: the re-check would see the same, so it takes them (a round trip fewer).
        self._last_look: dict[tuple[str, str], object] = {}
        self._lock = threading.Lock()

    def look(self, step, node, waiting: bool = False) -> object:
        """The step's facts now, in one round trip (`waiting`: with its wait probes first)."""
        found = (step.wait_probes(node) if waiting else []) + step.probes(node)
        return step.observe(F.gather(node.conn, found, step=step.name), node)

    def gather(self, step, node, facts: list[F.Fact]) -> F.Found:
        """These facts now, in one round trip, parsed (a request the step makes itself)."""
        return F.gather(node.conn, facts, step=step.name)

    def run(self, step, node, action, *more_uploads):
        """One action; with more_uploads (take_uploads' run of uploads), all in one round trip.
        A wait returns (and keeps, for `recheck`) the facts it ended on."""
        key = (step.label, node.name)
        with self._lock:
            self._last_look.pop(key, None)
        if action.wait:
            if self.waiter is None:
                raise RuntimeError("a wait outside a runner: nothing polls it")
            result = self.waiter(step, node, action.wait)
            with self._lock:
                self._last_look[key] = result
        elif action.upload_to:
            files = [(a.content or "", a.upload_to, a.mode) for a in (action, *more_uploads)]
            result = node.conn.put_texts(files, sudo=action.sudo, step=step.name)
        else:
            result = node.conn.run(list(action.argv), sudo=action.sudo, stdin=action.stdin,
                                   retry=action.retry, timeout=action.timeout, step=step.name,
                                   check=action.check)
        self.done(step, node, action)
        return result

    def done(self, step, node, action, result: object = None) -> None:
        """Record a tagged action as returned (a laptop-side one with what it made)."""
        if action.tag:
            node.run.ledger.record(node.name, step.label, action.tag, note=action.note,
                                   result=result)

    def last_look(self, step, node) -> object | None:
        """The facts the step's last wait on the node ended on, if nothing ran since."""
        with self._lock:
            return self._last_look.pop((step.label, node.name), None)

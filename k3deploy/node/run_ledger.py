"""What this run has done so far, per node: the actions the runner ran, with when they returned
and what they carried, and the cluster-wide decisions steps made from every node's facts.

The runner is the only writer (node/executor.py records each action it runs, run/runner.py
each `settle` decision); steps read it. The run's inputs (node/run_inputs.py) are settled
before the first look and never change; what the run learns as it goes lives here.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Done:
    """One action the runner ran on a node for a step: when (monotonic) it returned, the
    action's `note` (what the plan knew, e.g. the incident an archive moved away) and what it
    returned (a laptop-side action's files)."""

    step: str
    tag: str
    at: float
    note: object = None
    result: object = None


class RunLedger:
    def __init__(self) -> None:
        self._done: dict[str, list[Done]] = {}
        self._decided: dict[type, object] = {}
        self._lock = threading.Lock()

    # -- written by the runner ---------------------------------------------------------
    def record(self, node: str, step: str, tag: str, note: object = None,
               result: object = None, at: float | None = None) -> Done:
        done = Done(step, tag, time.monotonic() if at is None else at, note, result)
        with self._lock:
            self._done.setdefault(node, []).append(done)
        return done

    def decide(self, decision: object) -> None:
        """A cluster-wide decision (one per type: the last one made holds)."""
        with self._lock:
            self._decided[type(decision)] = decision

    # -- read by steps -----------------------------------------------------------------
    def all(self, node: str, tag: str, step: str | None = None) -> list[Done]:
        with self._lock:
            return self._matching(node, tag, step)

    def _matching(self, node: str, tag: str, step: str | None) -> list[Done]:
        return [d for d in self._done.get(node, [])
                if d.tag == tag and (step is None or d.step == step)]

    def last(self, node: str, tag: str, step: str | None = None) -> Done | None:
        found = self.all(node, tag, step)
        return found[-1] if found else None

    def count(self, node: str, tag: str, step: str | None = None) -> int:
        return len(self.all(node, tag, step))

    def notes(self, tag: str, step: str | None = None) -> dict[str, object]:
        """node -> the note of the last such action there."""
        with self._lock:
            found = {n: self._matching(n, tag, step) for n in self._done}
        return {n: done[-1].note for n, done in found.items() if done}

    def decided(self, kind: type[T]) -> T | None:
        with self._lock:
            found = self._decided.get(kind)
        return found if isinstance(found, kind) else None

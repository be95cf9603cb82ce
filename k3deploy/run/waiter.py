"""The one polling loop: a step's `Wait` action, run by the runner.

Each poll looks at the step's facts on the waiting node (a `cluster` wait: on every node of the
step, in parallel) and asks the step's plan whether it still yields the wait. The step names
what it waits for, how often to look, the timeout and the stall limit; the loop is the same for
the download, the endpoint's health, a Ray worker's join and `vllm serve` taking the GPUs.
"""

from __future__ import annotations

import time
from typing import TypeVar

from pydantic import BaseModel

from k3deploy.core import group, interrupt
from k3deploy.core.errors import StepFailed
from k3deploy.node.context import NodeContext
from k3deploy.steps.base import Step, Wait

F = TypeVar("F")  # the step's facts record


class Waiter:
    def __init__(self, contexts: list[NodeContext]):
        self.contexts = contexts   # every node of the run, in rank order

    def __call__(self, step: Step[F, BaseModel], node: NodeContext, wait: Wait) -> F:
        started = time.monotonic()
        marker, changed = object(), started
        while True:
            looked = time.monotonic()
            facts = self._look(step, node, wait, looked - started, looked)
            step.show_progress(facts, node)
            if not any(a.waits_for(wait) for a in step.plan(facts, node)):
                return facts
            now, seen = time.monotonic(), step.progress(facts, node)
            if seen is None or seen != marker:   # None: no measure yet, nothing to stall
                marker, changed = seen, now
            if wait.stall and now - changed > wait.stall:
                raise StepFailed(node.name, f"waited for: {wait.until}; no progress for "
                                 f"{wait.stall:.0f}s", step=step.name, hint=wait.hint or
                                 "re-run to resume; `k3deploy logs` collects the node's logs")
            if wait.timeout and now - started > wait.timeout:
                raise StepFailed(node.name, f"waited for: {wait.until}; not so within "
                                 f"{wait.timeout:.0f}s", step=step.name, hint=wait.hint)
            # Paced by the looks' starts: a look held on the node (download_hold.py) or slowed
            # by a round trip is part of the poll, not added to it.
            interrupt.sleep(max(0.0, wait.poll - (time.monotonic() - looked)))

    def _look(self, step: Step[F, BaseModel], node: NodeContext, wait: Wait, waited: float,
              looked_at: float) -> F:
        if not wait.cluster:
            return step.facts(node, waiting=True)
        others = [c for c in self.contexts if c.name != node.name]
        seen = group.run_each(lambda c: step.facts(c, waiting=True), [*others, node],
                              key=lambda c: c.name).unwrapped()
        facts = seen[node.name]
        step.check_cluster({c.name: seen[c.name] for c in self.contexts}, node.run, waited,
                           looked_at)
        return facts

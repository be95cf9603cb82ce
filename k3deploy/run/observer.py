"""Facts for every step of a playbook, batched: one round trip per node, in the first step,
looks at what all the steps still to come will need; it is repeated only after a step changed
something.

A change on one node can change what another node's later steps see (a relaunched worker makes
the head's endpoint unhealthy), so any change anywhere drops every node's batch.

A look ahead of time can only prove that there is nothing to do: what the world does by itself
meanwhile (an engine finishing its load between two nodes' looks) is no change of ours, so the
runner decides to act or to fail only on a look made for the step itself (`fresh`).
"""

from __future__ import annotations

import threading

from k3deploy.node import facts as F
from k3deploy.steps.base import Step

class Observer:
    def __init__(self, steps: list[Step]):
        self.steps = steps
        self._batches: dict[str, dict[str, dict]] = {}   # node -> step label -> parsed values
        self._first: set[str] = set()   # nodes whose first step's part is from the first look
        self._lock = threading.Lock()

    def first_look(self, ctx, extra: list[F.Fact]) -> dict:
        """The run's first round trip to a node: every step's facts and `extra` (which machine
        it is). Nothing ran before the first step, so its part counts as looked at for it."""
        values = self._fill(ctx, 0, extra)
        if self.steps:
            with self._lock:
                self._first.add(ctx.name)
        return {f.name: values[f.name] for f in extra}

    def facts(self, step: Step, ctx, fresh: bool = False) -> tuple[dict, bool]:
        """The step's facts, and whether they were looked at for this step (`fresh`: look
        now) rather than ahead of it, in an earlier step's batch."""
        found = None if fresh else self._pop(ctx, step)
        looked_now = found is None or self._took_first(ctx, step)
        if found is None:
            self._fill(ctx, self.steps.index(step))
            found = self._pop(ctx, step)
        return step.facts_from(found, ctx), looked_now

    def changed(self) -> None:
        with self._lock:
            self._batches.clear()
            self._first.clear()

    def _took_first(self, ctx, step: Step) -> bool:
        with self._lock:
            if step is not self.steps[0] or ctx.name not in self._first:
                return False
            self._first.discard(ctx.name)
            return True

    def _pop(self, ctx, step: Step) -> dict | None:
        with self._lock:
            return self._batches.get(ctx.name, {}).pop(step.label, None)

    def _fill(self, ctx, start: int, extra: list[F.Fact] = ()) -> dict:
        """Looks for the steps from `start` on (and `extra`, kept by its own names), in one
        round trip; keeps each step's part."""
        probes = {step.label: step.probes(ctx) for step in self.steps[start:]}
        batch = [f for label, mine in probes.items() for f in F.renamed(mine, f"{label}.")]
        values = F.gather(ctx.conn, [*extra, *batch],
                          step=self.steps[start].name if start < len(self.steps) else None)
        with self._lock:
            self._batches[ctx.name] = {label: _part(values, f"{label}.") for label in probes}
        return values


def _part(values: dict, prefix: str) -> dict:
    return {k[len(prefix):]: v for k, v in values.items() if k.startswith(prefix)}

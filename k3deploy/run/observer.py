"""Facts for every step of a playbook, batched: one round trip per node, in the first step,
looks at what all the steps still to come will need (and, the first time, which machine the
node is); it is repeated only after a step changed something.

A change on one node can change what another node's later steps see (a relaunched worker makes
the head's endpoint unhealthy), so any change anywhere drops every node's batch.

A step with a fact that must not be asked ahead as it is (`Fact.ahead`) has its other facts
batched all the same, and that fact asked in its own look, or asked ahead in a bounded form
(the endpoint's checks) in the node's first look only: an answer the bound cut short is a
problem, so the step looks again (run/runner.py _decide), and a run that changes nothing makes
one look per node.

A look ahead of time can only prove that there is nothing to do: what the world does by itself
meanwhile (an engine finishing its load between two nodes' looks) is no change of ours, so the
runner decides to act or to fail only on a look made for the step itself (`fresh`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from k3deploy.node import facts as F
from k3deploy.node.identity import IDENTITY
from k3deploy.node.context import NodeContext
from k3deploy.steps.base import AnyFact, AnyStep

class Observer:
    def __init__(self, steps: list[AnyStep],
                 identified: Callable[[NodeContext, F.Found, AnyStep], None] | None = None,
                 looking: Callable[[NodeContext], None] | None = None):
        """identified(ctx, values, step): the node's answer to IDENTITY (which machine it is),
        read in the first look at each node, before the step that looks decides anything.
        looking(ctx): called before each round trip to the node."""
        self.steps = steps
        self.identified = identified
        self.looking = looking
        self._batches: dict[str, dict[str, F.Found]] = {}   # node -> step label -> parsed values
        self._own: dict[str, dict[str, list[AnyFact]]] = {}   # node -> step label -> facts left for its look
        self._known: set[str] = set()   # nodes whose identity was read in this run
        self._lock = threading.Lock()

    def facts(self, step: AnyStep, ctx: NodeContext, fresh: bool = False) -> tuple[object, bool]:
        """The step's facts, and whether they were looked at for this step (`fresh`: look
        now) rather than ahead of it, in an earlier step's batch."""
        found, own = (None, []) if fresh else self._pop(ctx, step)
        looked_now = found is None
        if looked_now:
            self._fill(ctx, self.steps.index(step))
            found, own = self._pop(ctx, step)
        return step.observe(self._complete(ctx, step, found, own), ctx), looked_now

    def peek(self, step: AnyStep, ctx: NodeContext) -> object:
        """The step's facts, left in the batch for the step's own decision on the node (a
        cluster-wide `settle` reads every node's first: no extra round trip when nothing
        changed since the batch was made)."""
        with self._lock:
            found = self._batches.get(ctx.name, {}).get(step.label)
        if found is None:
            self._fill(ctx, self.steps.index(step))
        found, own = self._pop(ctx, step)
        found = self._complete(ctx, step, found, own)
        with self._lock:
            self._batches.setdefault(ctx.name, {})[step.label] = found
        return step.observe(found, ctx)

    def changed(self) -> None:
        with self._lock:
            self._batches.clear()
            self._own.clear()

    def _pop(self, ctx: NodeContext, step: AnyStep) -> tuple[F.Found | None, list[AnyFact]]:
        with self._lock:
            own = self._own.get(ctx.name, {}).pop(step.label, [])
            return self._batches.get(ctx.name, {}).pop(step.label, None), own

    def _complete(self, ctx: NodeContext, step: AnyStep, found: F.Found | None,
                  own: list[AnyFact]) -> F.Found:
        """The batched part of a step's facts, with those it asks only in its own look."""
        if found is None:   # _fill keeps a part for every step it looked for
            raise RuntimeError(f"no batch for {step.label} on {ctx.name} after a look")
        if not own:
            return found
        if self.looking:
            self.looking(ctx)
        return {**found, **F.gather(ctx.conn, own, step=step.name)}

    def _fill(self, ctx: NodeContext, start: int) -> None:
        """Looks for the steps from `start` on, in one round trip; keeps each step's part."""
        probes = {step.label: step.probes(ctx) for step in self.steps[start:]}
        # A later step's facts not to be asked ahead (Fact.ahead) wait for its own look; those
        # with a bounded form are asked in the node's first look only (Fact.asked_ahead). The
        # step's own look asks them as they are.
        first = ctx.name not in self._known   # the node's first look: which machine it is, too
        later = list(probes)[1:]
        own = {label: [f for f in probes[label] if f.asked_ahead(first) is None] for label in later}
        probes = {label: _ahead(mine, first) if label in own else mine
                  for label, mine in probes.items()}
        batch = [f for label, mine in probes.items() for f in F.renamed(mine, f"{label}.")]
        if self.looking:
            self.looking(ctx)
        values = F.gather(ctx.conn, [*(IDENTITY if first else []), *batch],
                          step=self.steps[start].name if start < len(self.steps) else None)
        if first:
            with self._lock:
                self._known.add(ctx.name)
            if self.identified:
                self.identified(ctx, values, self.steps[start])
        with self._lock:
            self._batches[ctx.name] = {label: _part(values, f"{label}.") for label in probes}
            self._own[ctx.name] = {label: mine for label, mine in own.items() if mine}


def _ahead(facts: list[AnyFact], first: bool) -> list[AnyFact]:
    return [asked for asked in (f.asked_ahead(first) for f in facts) if asked is not None]


def _part(values: F.Found, prefix: str) -> F.Found:
    return {k[len(prefix):]: v for k, v in values.items() if k.startswith(prefix)}

"""The runner's side of a step's cluster probes (steps/base.py ClusterProbe): every node's
commands at once (a node's several one after another), each answer parsed into that node's
facts, before `cluster_problems` reads them. The step decides what to run from the facts;
running it here keeps its hooks pure."""

from __future__ import annotations

import dataclasses

from k3deploy.core import group
from k3deploy.core.errors import Interrupted, K3Error
from k3deploy.node.context import NodeContext, RunContext
from k3deploy.steps.base import AnyStep, ClusterProbe


def look_across(step: AnyStep, all_facts: dict[str, object], contexts: dict[str, NodeContext],
                run: RunContext) -> dict[str, object]:
    """all_facts with each probed node's answers under their probes' keys: the parsed value,
    or the K3Error that stopped the node's commands there (for that probe and the ones after
    it). Ctrl-C stops the step (Interrupted)."""
    probes = {n: each(p) for n, p in step.cluster_probes(all_facts, run).items()}
    if not probes:
        return all_facts

    def one(name: str) -> dict[str, object]:
        found: dict[str, object] = {}
        for probe in probes[name]:
            try:
                res = contexts[name].conn.run(list(probe.argv), stdin=probe.stdin, check=False,
                                              timeout=probe.timeout, step=step.name)
            except Interrupted:
                raise
            except K3Error as err:
                return found | {p.key: err for p in probes[name] if p.key not in found}
            found[probe.key] = probe.parse(res)
        return found

    found = group.run_each(one, list(probes))
    for err in found.failed.values():
        if isinstance(err, Interrupted):
            raise err
    found.failures(K3Error)   # anything else is a bug: raised
    return {n: _with(f, found.value(n)) if n in probes else f for n, f in all_facts.items()}


def _with(facts: object, found: dict[str, object]) -> object:
    """The step's facts (a frozen dataclass: steps/base.py) with what its probes found."""
    if not dataclasses.is_dataclass(facts) or isinstance(facts, type):
        raise TypeError(f"a step's facts are a dataclass instance, not {type(facts).__name__}")
    return dataclasses.replace(facts, **found)


def each(probes: ClusterProbe | tuple[ClusterProbe, ...]) -> tuple[ClusterProbe, ...]:
    """A node's cluster probes: one ClusterProbe, or several in the order they run."""
    return tuple(probes) if isinstance(probes, (tuple, list)) else (probes,)

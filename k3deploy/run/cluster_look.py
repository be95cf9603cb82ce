"""The runner's side of a step's cluster probes (steps/base.py ClusterProbe): every node's
command at once, each answer parsed into that node's facts, before `cluster_problems` reads
them. The step decides what to run from the facts; running it here keeps its hooks pure."""

from __future__ import annotations

import dataclasses

from k3deploy.core import group
from k3deploy.core.errors import Interrupted, K3Error


def look_across(step, all_facts: dict[str, object], contexts: dict, run) -> dict[str, object]:
    """all_facts with each probed node's answer under the probe's key: the parsed value, or
    the K3Error that stopped the command on that node. Ctrl-C stops the step (Interrupted)."""
    probes = step.cluster_probes(all_facts, run)
    if not probes:
        return all_facts

    def one(name: str):
        probe = probes[name]
        res = contexts[name].conn.run(list(probe.argv), stdin=probe.stdin, check=False,
                                      timeout=probe.timeout, step=step.name)
        return probe.parse(res)

    found = group.run_each(one, list(probes))
    for err in found.failed.values():
        if isinstance(err, Interrupted):
            raise err
    found.failures(K3Error)   # anything else is a bug: raised
    return {n: _with(f, probes[n].key, found[n]) if n in probes else f
            for n, f in all_facts.items()}


def _with(facts, key: str, value):
    """The node's facts with the probe's answer in the field `key` (a frozen dataclass)."""
    return dataclasses.replace(facts, **{key: value})

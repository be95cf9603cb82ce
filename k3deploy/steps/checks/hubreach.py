"""Preflight's look at the way out: every node reaches the Hub endpoint and the CDN host its
/resolve redirects to (the gate check on the laptop learned it, cluster/hubgate.py). A node
that cannot reach the CDN would only show read timeouts part-way through the download."""

from __future__ import annotations

from typing import Protocol

from k3deploy.facts.reach import Reach, parse_hub_reach
from k3deploy.node import facts as F
from k3deploy.steps.base import AnyFact
from k3deploy.node.context import NodeContext
from k3deploy.remote import script_text

PROGRAM = script_text("hub_reach.py")


class Found(Protocol):
    """What of a step's facts (preflight's) this reads: the fact `facts` gives."""

    @property
    def hub_reach(self) -> tuple[Reach, ...] | None: ...


def _urls(node: NodeContext) -> list[str]:
    reach = node.run.inputs.hub_reach
    if reach is None:
        return []
    return [f"{o.scheme}://{o.host}:{o.port}" for o in reach.origins()]


def facts(node: NodeContext) -> list[AnyFact]:
    urls = _urls(node)
    return [F.python("hub_reach", PROGRAM, urls, parse_hub_reach)] if urls else []


def problems(found: Found, node: NodeContext) -> list[tuple[str, str]]:
    urls, reach = _urls(node), node.run.inputs.hub_reach
    if not urls or reach is None:   # no urls when no reach
        return []
    answers = found.hub_reach
    if answers is None:
        return [("hub", f"could not probe {', '.join(urls)} from this node (python3 failed)")]
    names = {f"{o.scheme}://{o.host}:{o.port}": ("the Hub" if o == reach.hub else "the Hub's CDN")
             for o in reach.origins()}
    return [("hub", f"cannot reach {names[r.target]} at {r.target.split('://', 1)[1]} "
             f"({r.why_not}): the weights come from there; open outbound TCP to it (firewall, "
             "proxy or DNS on this node)")
            for r in answers if not r.reached and r.target in names]

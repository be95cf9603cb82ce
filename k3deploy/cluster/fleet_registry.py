"""Which groups the router should hold, from what `up`/`down` found: pure, no I/O.

`up` registers the groups whose own bring-up (verify included) passed and removes every other
entry (a group that failed, one torn down, a URL from an older inventory); the diff itself is
remote/router_reconcile.py's, which the router's node runs too. `down` removes one group's
entries before that group is stopped.
"""

from __future__ import annotations

from typing import NamedTuple

from k3deploy.remote.router_reconcile import LEAVING, Plan, Serving, Worker, norm_url, plan

READY = "ready"


class GroupEndpoint(NamedTuple):
    """A group as the router knows it: its name in the fleet and its worker URL."""
    name: str
    url: str


def wanted(groups: list[GroupEndpoint], verified: set[str], api_key: str | None) -> list[Serving]:
    """The Serving entries for the verified groups, in the fleet's order. Every group's
    engine takes the fleet's one key (SMG passes the client's key through)."""
    return [Serving(g.url, api_key) for g in groups if g.name in verified]


def register_plan(workers: list[Worker], groups: list[GroupEndpoint], verified: set[str],
                  api_key: str | None) -> Plan:
    return plan(workers, wanted(groups, verified, api_key))


def deregister_ids(workers: list[Worker], group: GroupEndpoint) -> list[str]:
    """The router's entries for one group (every status: a draining one is on its way)."""
    return [w["id"] for w in workers if norm_url(w["url"]) == norm_url(group.url)
            and w.get("status") != LEAVING]


def not_ready(workers: list[Worker], groups: list[GroupEndpoint], verified: set[str]) -> list[str]:
    """The verified groups the router does not report ready yet (by name)."""
    status = {norm_url(w["url"]): w.get("status") for w in workers}
    return [g.name for g in groups if g.name in verified and status.get(norm_url(g.url)) != READY]


def is_noop(p: Plan) -> bool:
    return not (p.adds or p.removes or p.waits)


def plan_lines(p: Plan, groups: list[GroupEndpoint], workers: list[Worker]) -> list[str]:
    """What a plan does, by group name where the URL is a group's."""
    names = {norm_url(g.url): g.name for g in groups}
    by_id = {w["id"]: norm_url(w["url"]) for w in workers}

    def named(url: str) -> str:
        return f"group {names[url]} ({url})" if url in names else url

    out = [f"router: register {named(norm_url(s.url))}" for s in p.adds]
    out += [f"router: remove {named(by_id.get(wid, wid))} (worker {wid})" for wid in p.removes]
    out += [f"router: {named(norm_url(u))} is still draining out; registered by the next up"
            for u in p.waits]
    return out

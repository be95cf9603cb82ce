"""`status -i FLEET`'s document and verdict, from what was looked at: pure, no I/O.

The document is {fleet, router, groups}: `groups` holds each group's one-group status document
as `status -i` of that group alone builds it (status_cmd.collect), `router` what its node and
its admin API said (the worker list as SMG reports it, each entry named by the group whose URL
it is), and `fleet` the verdict: serving when the router runs, answers, and reports every
group ready; degraded when it reports some; down when the router is not running or reports
none; unknown when its node is out of reach or its admin API does not answer. A group the
router reports ready whose own status says it is not serving (down, stopped by its guard,
degraded) is not counted: the router has not seen it go yet.
"""

from __future__ import annotations

from typing import TypedDict

from k3deploy.cli import cluster_state
from k3deploy.cli.status_doc import StatusDoc
from k3deploy.cluster.fleet_registry import READY, GroupEndpoint
from k3deploy.core.errors import EXIT_OK, EXIT_PARTIAL, EXIT_STEP_FAILED
from k3deploy.core.jsonvalue import JSON
from k3deploy.remote.router_reconcile import Worker, norm_url

SERVING, DEGRADED, DOWN, UNKNOWN = "serving", "degraded", "down", "unknown"
# a group's own state that does not contradict the router's `ready` (a node out of reach: the
# router's word stands; the exit code says partial)
STANDS = (cluster_state.SERVING, cluster_state.UNREACHABLE)


class RouterLook(TypedDict):
    """What status found on the router's node (fleet_status.look_router)."""
    reachable: bool
    error: str | None                      # why the node or the admin API did not answer
    container: dict[str, JSON] | None      # facts/docker.py summary; None: no container
    workers: list[Worker] | None           # GET /workers; None: not asked or no answer


class WorkerView(TypedDict):
    id: str
    url: str
    group: str | None                      # the group whose worker URL it is; None: no group's
    status: str | None                     # SMG's: pending, ready, not_ready, failed, draining
    healthy: bool | None                   # SMG's is_healthy
    in_flight: int | None                  # SMG's load: its requests in flight on the worker


class RouterDoc(TypedDict):
    node: str
    url: str                               # the fleet's endpoint (the OpenAI base URL)
    reachable: bool
    running: bool
    error: str | None
    container: dict[str, JSON] | None
    workers: list[WorkerView] | None


class GroupVerdict(TypedDict):
    ready: bool                            # counted as serving behind the router
    why: str                               # "ready", "not registered", "router: not_ready", ...


class FleetVerdict(TypedDict):
    name: str
    state: str                             # serving, degraded, down, unknown
    why: str
    groups: dict[str, GroupVerdict]


class FleetStatusDoc(TypedDict):
    fleet: FleetVerdict
    router: RouterDoc
    groups: dict[str, StatusDoc]


def router_doc(node: str, url: str, groups: list[GroupEndpoint], look: RouterLook) -> RouterDoc:
    names = {norm_url(g.url): g.name for g in groups}
    workers = None if look["workers"] is None else [
        WorkerView(id=w["id"], url=w["url"], group=names.get(norm_url(w["url"])),
                   status=w.get("status"), healthy=w.get("is_healthy"), in_flight=w.get("load"))
        for w in look["workers"]]
    container = look["container"]
    return {"node": node, "url": url, "reachable": look["reachable"],
            "running": bool(container and container.get("running") is True),
            "error": look["error"], "container": container, "workers": workers}


def _group_verdict(router: RouterDoc, name: str, group: StatusDoc) -> GroupVerdict:
    entries = [w for w in router["workers"] or [] if w["group"] == name]
    state = group["cluster"]["state"]
    if not entries:
        return {"ready": False, "why": "not registered with the router"}
    if not any(w["status"] == READY for w in entries):
        said = ", ".join(str(w["status"]) for w in entries)
        return {"ready": False, "why": f"the router reports it {said}"}
    if state not in STANDS:
        return {"ready": False, "why": f"the router reports it ready, its own status: {state}"}
    return {"ready": True, "why": "ready"}


def verdict(name: str, router: RouterDoc, groups: dict[str, StatusDoc]) -> FleetVerdict:
    if not router["reachable"]:
        return _verdict(name, UNKNOWN, f"the router's node {router['node']} could not be "
                        f"reached: {router['error']}", {})
    if not router["running"]:
        return _verdict(name, DOWN, f"the router is not running on {router['node']}", {})
    if router["workers"] is None:
        return _verdict(name, UNKNOWN, f"the router's admin API did not answer: "
                        f"{router['error']}", {})
    each = {g: _group_verdict(router, g, doc) for g, doc in groups.items()}
    ready = [g for g, v in each.items() if v["ready"]]
    if len(ready) == len(each):
        return _verdict(name, SERVING, f"the router reports every group ready "
                        f"({', '.join(ready)})", each)
    if not ready:
        return _verdict(name, DOWN, "the router reports no group ready", each)
    return _verdict(name, DEGRADED, f"the router reports {len(ready)} of {len(each)} groups "
                    f"ready ({', '.join(ready)})", each)


def _verdict(name: str, state: str, why: str, each: dict[str, GroupVerdict]) -> FleetVerdict:
    return {"name": name, "state": state, "why": why, "groups": each}


def document(name: str, router: RouterDoc, groups: dict[str, StatusDoc]) -> FleetStatusDoc:
    return {"fleet": verdict(name, router, groups), "router": router, "groups": groups}


def exit_code(doc: FleetStatusDoc) -> int:
    """As the one-group status: 3 when some node (the router's or a group's) is out of reach,
    0 when the fleet serves, 1 otherwise."""
    out_of_reach = not doc["router"]["reachable"] or any(
        not n["live"].get("reachable") for g in doc["groups"].values() for n in g["nodes"].values())
    if out_of_reach:
        return EXIT_PARTIAL
    return EXIT_OK if doc["fleet"]["state"] == SERVING else EXIT_STEP_FAILED


def lines(doc: FleetStatusDoc) -> list[str]:
    """The verdict, then the router's line and one per worker it holds (what follows, each
    group's status, is status_view's)."""
    fleet, router = doc["fleet"], doc["router"]
    out = [f"fleet {fleet['name']}: {fleet['state']}: {fleet['why']}"]
    where = f"router on {router['node']} ({router['url']})"
    if not router["reachable"]:
        return out + [f"{where}: unreachable"]
    running = "running" if router["running"] else \
        f"not running (container: {(router['container'] or {}).get('status') or 'none'})"
    workers = router["workers"]
    held = "" if workers is None else f", {len(workers)} worker(s), " \
        f"{sum(w['in_flight'] or 0 for w in workers)} request(s) in flight"
    out.append(f"{where}: {running}{held}")
    for w in workers or []:
        healthy = {True: "healthy", False: "unhealthy", None: "health unknown"}[w["healthy"]]
        who = f"group {w['group']}" if w["group"] else "no group of this fleet"
        flight = "" if w["in_flight"] is None else f", {w['in_flight']} in flight"
        out.append(f"  {who}: {w['status']}, {healthy}{flight} ({w['url']})")
    for g, v in fleet["groups"].items():
        # why a group does not count, unless its worker line above says it already
        said = {w["status"] for w in workers or [] if w["group"] == g}
        if not v["ready"] and (not said or READY in said):
            out.append(f"  group {g}: {v['why']}")
    return out

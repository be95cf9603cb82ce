"""What the router should be told, from what it says and what should serve: pure, no I/O.

The pattern is dstack's (dstackai/dstack@511c318c
src/dstack/_internal/proxy/gateway/services/model_routers/sglang.py update_replicas): diff
the router's `GET /workers` against the replicas that should serve, by URL; POST the missing,
DELETE the extra by id. Two things SMG adds to that (smg-project/smg@f8daa883):
- `failed` is terminal: a worker that failed its health checks long enough is never probed
  again (crates/protocols/src/worker.rs WorkerStatus::Failed, "Sustained liveness failure"),
  so a group that came back stays unused until it is registered anew: delete, then add.
- a URL registered once answers a second POST with 409 (model_gateway/src/worker/service.rs
  Conflict), and DELETE is an asynchronous job (202): a worker `draining` is on its way out,
  so it is neither deleted again nor added back until it has gone (the next reconcile).
Status names are WorkerStatus in snake_case: pending, ready, not_ready, failed, draining.

Both sides import this (the laptop's `up`/`watch`, a node's guard): standard library only.
"""
from typing import NamedTuple, TypedDict

TERMINAL = "failed"
LEAVING = "draining"


# a total=False base rather than NotRequired (Python 3.11): this module runs on the node's python3
class _WorkerState(TypedDict, total=False):
    status: str        # pending, ready, not_ready, failed, draining
    is_healthy: bool   # what `status` shows besides
    # requests this router has in flight on the worker (smg-project/smg@f8daa883
    # crates/protocols/src/worker.rs WorkerInfo.load, "Current load on the worker")
    load: int


class Worker(_WorkerState):
    """One entry of SMG's `GET /workers` list: the keys reconcile reads (SMG gives more)."""
    id: str
    url: str


class Serving(NamedTuple):
    """A group verified and serving: its rank-0 engine URL and the key the engine wants."""
    url: str
    api_key: str | None


class Plan(NamedTuple):
    adds: list[Serving]   # in URL order
    removes: list[str]    # worker ids, in URL order
    waits: list[str]      # URLs held back this time (a worker with that URL is draining)


def norm_url(url: str) -> str:
    """SMG keeps a worker's URL as given; one trailing slash more is the same server."""
    return url.rstrip("/")


def plan(router_workers: list[Worker], serving: list[Serving]) -> Plan:
    """router_workers: `GET /workers`'s `workers` list (Worker: id, url, status);
    serving: Serving entries. Returns the Plan that makes the first match the second."""
    wanted = {norm_url(s.url): s for s in serving}
    by_url: dict[str, list[Worker]] = {}
    for w in router_workers:
        by_url.setdefault(norm_url(w["url"]), []).append(w)
    adds: list[Serving] = []
    removes: list[str] = []
    waits: list[str] = []
    for url in sorted(set(wanted) | set(by_url)):
        gone, add, wait = _one_url(by_url.get(url, []), url in wanted)
        removes += gone
        if wait:
            waits.append(url)
        elif add:
            adds.append(wanted[url])
    return Plan(adds, removes, waits)


def _one_url(workers: list[Worker], is_wanted: bool) -> tuple[list[str], bool, bool]:
    """(ids to delete, add it?, wait?) for one URL's router entries."""
    leaving = [w for w in workers if w.get("status") == LEAVING]
    staying = [w for w in workers if w.get("status") != LEAVING]
    if not is_wanted:
        return [w["id"] for w in staying], False, False
    live = [w for w in staying if w.get("status") != TERMINAL]
    # one entry per URL is all SMG allows; keep the first live one, drop the rest
    gone = [w["id"] for w in staying if w not in live[:1]]
    if live:
        return gone, False, False
    return gone, True, bool(leaving)

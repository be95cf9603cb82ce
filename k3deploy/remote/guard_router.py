"""A fleet's group leaves the router before its guard stops its ranks (issue 54): the guard's
part, standard library only, uploaded beside guard.py for the groups of a fleet only.

On an incident every guard of the group (each fires, first or by adopting a peer's incident)
asks the router for its workers and removes the group's entry, found by its URL (the group's
head engine, as `up` registered it), then goes on to stop its engine. DELETE is an asynchronous
job in SMG: the worker turns `draining` at once, which no request is routed to, and leaves the
list after --drain-settle-secs (smg-project/smg@f8daa883 model_gateway/src/worker/service.rs
delete_worker; crates/protocols/src/worker.rs WorkerStatus::Draining "Excluded from selection";
model_gateway/src/workflow/steps/local/drain_workers.rs). A worker already draining or gone
(another guard of the group was first) needs nothing; 404 on DELETE is the same race.

Auth: the admin key of a control-plane key with role admin, as `Authorization: Bearer`
(crates/auth/src/middleware.rs control_plane_auth_middleware): read from its 0600 file when
needed, never in argv, a log or the incident record.

Bounded: a router out of reach (its node lost with this group's) costs at most two calls of
CALL_TIMEOUT before the ranks are stopped all the same.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from router_admin import RouterAdmin, RouterAdminError
from router_reconcile import LEAVING, norm_url

if TYPE_CHECKING:
    from guard_record import RouterLink   # base (the router on the private network), worker
    from router_reconcile import Worker     # (this group's URL there), key_file (0600)

CALL_TIMEOUT = 3.0   # seconds per admin call: the router is on the private network


def entries(workers: list[Worker], url: str) -> list[str]:
    """The ids of the group's entries the router still routes to, or may (not draining)."""
    return [w["id"] for w in workers
            if norm_url(w["url"]) == norm_url(url) and w.get("status") != LEAVING]


def read_key(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return fh.read().strip()


def leave(link: RouterLink, admin: RouterAdmin | None = None) -> str:
    """Take the group out of the router; one line saying what happened (for the guard's log
    and the incident record: no key in it)."""
    try:
        admin = admin or RouterAdmin(link["base"], read_key(link["key_file"]), CALL_TIMEOUT)
        ids = entries(admin.workers(), link["worker"])
        removed = [wid for wid in ids if admin.remove(wid)]
    except (RouterAdminError, OSError) as err:
        return f"router: could not remove {link['worker']}: {err}"
    if not removed:
        return f"router: {link['worker']} was not routed to already"
    return f"router: removed {link['worker']} (worker {', '.join(removed)})"

"""`watch -i FLEET [--restart N]`: what watch (cli/watch_cmd.py FleetWatch) does on a fleet
(issue 54).

Each look is `status` of the fleet (cli/fleet_status.py: the router's worker list, then every
group's one-group status); the line shown is the fleet's verdict, or the first group its guard
stopped, with that group's incident. Each tick also mends the router: its worker list made the
groups that serve (mend below), as `up` makes it. The guard took that group out of the router before it
stopped its ranks (remote/guard_router.py), so the other groups serve meanwhile. `--restart N`
answers such an incident with the fleet's `up` (run/fleet_run.py): the stopped group is
relaunched warm and verified, every other group's bring-up is a no-op, and the router
registers the group again and reports it ready, the same path as `up` by hand.
"""

from __future__ import annotations

from k3deploy.cli import cluster_state
from k3deploy.cli import fleet_status_doc as fdoc
from k3deploy.cli.status_doc import Observed
from k3deploy.cluster.fleet import Fleet
from k3deploy.core.errors import Interrupted, K3Error, LockError
from k3deploy.core.state import ClusterLock
from k3deploy.remote.router_reconcile import LEAVING


def watched(doc: fdoc.FleetStatusDoc) -> tuple[Observed, str]:
    """What the watch loop acts on, and the line it shows: the first group its guard stopped
    (its own cluster record, incident included, so that `--restart` answers it), else the
    fleet's verdict (as a record with no incident)."""
    fleet = doc["fleet"]
    for name, group in doc["groups"].items():
        cluster = group["cluster"]
        if cluster["state"] == cluster_state.STOPPED:
            return cluster, f"fleet {fleet['name']}: group {name}: " + \
                cluster_state.line(cluster["name"], cluster)
    seen: Observed = {"name": fleet["name"], "state": fleet["state"], "incident": None,
                      "error": ""}
    return seen, f"fleet {fleet['name']}: {fleet['state']}: {fleet['why']}"   # status's first line


def observe(fleet: Fleet, accept_new_host_keys: bool,
            state_dir: str | None) -> tuple[Observed, str, fdoc.FleetStatusDoc | None]:
    """One look at the fleet (its `status`): watched()'s pair and the document, or the look's
    failure."""
    from k3deploy.cli import fleet_status
    try:
        doc = fleet_status.collect(fleet, accept_new_host_keys, state_dir)
    except K3Error as err:
        return ({"name": fleet.cluster, "state": "unknown", "incident": None, "error": str(err)},
                f"fleet {fleet.cluster}: unknown ({err})", None)
    return (*watched(doc), doc)


def serving_groups(doc: fdoc.FleetStatusDoc) -> set[str]:
    return {n for n, g in doc["groups"].items() if g["cluster"]["state"] == cluster_state.SERVING}


def out_of_step(doc: fdoc.FleetStatusDoc) -> bool:
    """The router's worker list is not the groups that serve: a serving group it does not hold
    (a router restarted by hand, a laptop that slept through a relaunch), an entry of a group
    that does not serve or of no group (a group torn down alone). A router that did not answer
    is left alone: there is nothing to compare."""
    router = doc["router"]
    if not router["reachable"] or (router["running"] and router["workers"] is None):
        return False
    held = {w["group"] for w in router["workers"] or [] if w["status"] != LEAVING}
    return held != serving_groups(doc)


def mend(fleet: Fleet, doc: fdoc.FleetStatusDoc, accept_new_host_keys: bool,
         state_dir: str | None) -> list[str]:
    """What a watch tick did to make the router's workers the serving groups (router_reconcile's
    diff, as `up` makes it); nothing while another run holds the fleet (an `up` or a `roll`
    takes a group out on purpose, and puts it back itself). A group registered in the moment
    its guard was leaving the router is never sent a request: SMG routes to a worker only once
    its health checks made it ready, which a stopping engine never is; the next tick removes it."""
    if not out_of_step(doc):
        return []
    from k3deploy.run.fleet_router import FleetRouter
    from k3deploy.run.fleet_run import FleetRun
    run = FleetRun(fleet, check=False, state_dir=state_dir,
                   accept_new_host_keys=accept_new_host_keys, log_json=False)
    try:
        with ClusterLock(run.dir):
            keys = run.keys(create=False, groups=False)
            if keys is None:
                return []
            with FleetRouter(fleet, keys, accept_new_host_keys) as router:
                return router.ensure_running() + router.reconcile(serving_groups(doc))
    except LockError:
        return []
    except K3Error as err:
        return [f"fleet {fleet.cluster}: the router could not be mended: {err.lines()[0]}"]


def bring_up(fleet: Fleet, accept_new_host_keys: bool, state_dir: str | None) -> tuple[int, str]:
    """The fleet's `up` (its lines, each group's run and the router's, on stderr as `up` says
    them): its exit code and one line for the outcome."""
    from k3deploy.cli.up_close import closing_for
    from k3deploy.run.fleet_run import FleetRun
    run = FleetRun(fleet, check=False, state_dir=state_dir,
                   accept_new_host_keys=accept_new_host_keys, log_json=False)
    try:
        code = run.up({}, closing_for)
    except Interrupted:   # Ctrl-C during the bring-up ends watch too
        raise
    except K3Error as err:   # another run holds the fleet, the router did not answer...
        return err.exit_code, f"bring-up failed: {err.lines()[0]}"
    return code, ("bring-up verified the endpoint again: every group verified and registered "
                  "with the router" if code == 0 else f"bring-up failed (exit {code}; its lines "
                  "above)")

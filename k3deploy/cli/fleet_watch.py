"""`watch -i FLEET [--restart N]`: what watch (cli/watch_cmd.py FleetWatch) does on a fleet
(issue 54).

Each look is `status` of the fleet (cli/fleet_status.py: the router's worker list, then every
group's one-group status); the line shown is the fleet's verdict, or the first group its guard
stopped, with that group's incident. The guard took that group out of the router before it
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
from k3deploy.core.errors import Interrupted, K3Error


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
            state_dir: str | None) -> tuple[Observed, str]:
    """One look at the fleet (its `status`): watched()'s pair, or the look's failure."""
    from k3deploy.cli import fleet_status
    try:
        return watched(fleet_status.collect(fleet, accept_new_host_keys, state_dir))
    except K3Error as err:
        return ({"name": fleet.cluster, "state": "unknown", "incident": None, "error": str(err)},
                f"fleet {fleet.cluster}: unknown ({err})")


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

"""`up`, `down` and `status` given a fleet inventory (issue 54): the fleet parsed and handed to
run/fleet_run.py (up, down) or cli/fleet_status.py; `chat` and `bench` find their endpoint
here (the router, or one group). Every other one-group command still refuses a fleet
(inventory.parse)."""

from __future__ import annotations

import json

from k3deploy.cli import fleet_status, fleet_status_doc, status_cmd
from k3deploy.cluster import fleet as fleet_mod
from k3deploy.cluster import inventory
from k3deploy.cluster.inventory import Inventory
from k3deploy.core.errors import BadInputError, InventoryError
from k3deploy.run.fleet_run import FleetRun
from k3deploy.serving import openai_client
from k3deploy.serving.fleet_target import fleet_target
from k3deploy.serving.openai_client import Target


def fleet_of(path: str) -> fleet_mod.Fleet | None:
    """The fleet PATH describes, None for a one-group inventory or a file that does not load
    (the one-group path says why, as before); InventoryError (exit 2) for an invalid fleet:
    every problem at once, before any SSH."""
    try:
        data = inventory.load_document(path)
    except InventoryError:
        return None
    return fleet_mod.parse(data, path) if fleet_mod.is_fleet(data) else None


def endpoint_of(inv_path: str, state_dir: str | None,
                group: str | None = None) -> tuple[Target, Inventory, bool]:
    """Where `chat` and `bench` send requests: a one-group inventory's head, a fleet's router,
    or (group) that group of the fleet; and whether it is a fleet's router."""
    if fleet := fleet_of(inv_path):
        found, inv = fleet_target(fleet, state_dir, group)
        return found, inv, group is None
    if group is not None:
        raise BadInputError(f"--group {group}: {inv_path} is a one-group inventory",
                            hint="--group names a group of a fleet inventory (its `groups:`)")
    inv = inventory.load(inv_path)
    return openai_client.target(inv, state_dir), inv, False


def fleet_up(fleet: fleet_mod.Fleet, *, check: bool, options: dict[str, object],
             accept_new_host_keys: bool, state_dir: str | None, log_json: bool) -> int:
    from k3deploy.cli.up_close import closing_for
    run = FleetRun(fleet, check=check, accept_new_host_keys=accept_new_host_keys,
                   state_dir=state_dir, log_json=log_json)
    return run.up(options, closing_for)


def fleet_verify(fleet: fleet_mod.Fleet, *, accept_new_host_keys: bool,
                 state_dir: str | None, log_json: bool) -> int:
    from k3deploy.run import fleet_verify as verify_mod
    return verify_mod.verify(FleetRun(fleet, check=False, accept_new_host_keys=accept_new_host_keys,
                                      state_dir=state_dir, log_json=log_json))


def fleet_logs(fleet: fleet_mod.Fleet, *, out: str | None, accept_new_host_keys: bool,
               state_dir: str | None, log_json: bool) -> int:
    from k3deploy.run import fleet_logs as logs_mod
    return logs_mod.collect(FleetRun(fleet, check=False, accept_new_host_keys=accept_new_host_keys,
                                     state_dir=state_dir, log_json=log_json), out)


def fleet_down(fleet: fleet_mod.Fleet, *, check: bool, options: dict[str, object],
               wipe_weights: bool, accept_new_host_keys: bool, state_dir: str | None,
               log_json: bool) -> int:
    run = FleetRun(fleet, check=check, accept_new_host_keys=accept_new_host_keys,
                   state_dir=state_dir, log_json=log_json)
    return run.down(options, wipe_weights)


def run_status(inv_path: str, *, json_out: bool, accept_new_host_keys: bool,
               state_dir: str | None, steps: bool = False) -> int:
    """`status`: a fleet's (fleet_status below), or one group's as before (status_cmd)."""
    if fleet := fleet_of(inv_path):
        return fleet_status_of(fleet, json_out=json_out, steps=steps, state_dir=state_dir,
                               accept_new_host_keys=accept_new_host_keys)
    return status_cmd.run_status(inv_path, json_out=json_out, steps=steps, state_dir=state_dir,
                                 accept_new_host_keys=accept_new_host_keys)


def fleet_status_of(fleet: fleet_mod.Fleet, *, json_out: bool, accept_new_host_keys: bool,
                    state_dir: str | None, steps: bool = False) -> int:
    """The fleet's verdict and router, then each group's one-group status (its text as
    `status` of that group alone prints it); --json: one document (cli/fleet_status_doc.py)."""
    doc = fleet_status.collect(fleet, accept_new_host_keys, state_dir)
    if json_out:
        print(json.dumps(doc, indent=1, default=str))
    else:
        out = fleet_status_doc.lines(doc)
        for g in fleet.groups:
            out += ["", f"group {g.name}:", *status_cmd.text(doc["groups"][g.name], g.inventory,
                                                            steps)]
        print("\n".join(out))
    return fleet_status_doc.exit_code(doc)

"""`k3deploy roll -i INV` (issue 54): a fleet's groups relaunched one at a time behind its
router, the endpoint serving throughout (run/fleet_roll.py). Registered by cli/app.py; the
work's imports wait until the command runs, as app.py's commands' do."""

from __future__ import annotations

from typing import Annotated

import typer

from k3deploy.cli.options import AcceptNew, Check, Inv, StateDir
from k3deploy.core.errors import BadInputError


def roll(ctx: typer.Context, inventory: Inv, check: Check = False,
         allow_outage: Annotated[bool, typer.Option(
             "--allow-outage", help="roll a one-group fleet (its endpoint is down while that "
             "group relaunches), or a group when no other is ready")] = False,
         drain_timeout: Annotated[float, typer.Option(
             "--drain-timeout", min=0, help="seconds a group's requests in flight may take to "
             "finish once it is out of the router")] = 300.0,
         accept_new_host_keys: AcceptNew = False, state_dir: StateDir = None) -> int:
    """A fleet: relaunch its groups one at a time (out of the router, drained, relaunched,
    verified, back in), the endpoint serving throughout."""
    from k3deploy.cli.fleet_cmd import fleet_of
    from k3deploy.cli.up_close import closing_for
    from k3deploy.cluster import inventory as inventory_mod
    from k3deploy.run.fleet_roll import RollOptions
    from k3deploy.run.fleet_roll import roll as run_roll
    from k3deploy.run.fleet_run import FleetRun
    fleet = fleet_of(inventory)
    if fleet is None:
        inventory_mod.load(inventory)   # a file that does not load says why (exit 2)
        raise BadInputError(f"{inventory} is one group, not a fleet: `roll` relaunches a "
                            "fleet's groups one at a time behind its router",
                            hint=f"`k3deploy up -i {inventory} --replace` relaunches a changed "
                                 "group (its endpoint is down meanwhile); a fleet inventory "
                                 "(`k3deploy plan --emit-inventory FILE --groups 2`) rolls")
    run = FleetRun(fleet, check=check, accept_new_host_keys=accept_new_host_keys,
                   state_dir=state_dir, log_json=bool(ctx.find_root().params.get("log_json")))
    return run_roll(run, closing_for, RollOptions(allow_outage, drain_timeout))

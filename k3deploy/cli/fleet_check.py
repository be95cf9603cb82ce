"""`check -i FLEET`: a fleet inventory validated and its groups listed (no node contacted).

`up`, `status`, `verify`, `watch`, `roll`, `logs` and `down` run a fleet (cli/fleet_cmd.py, cli/fleet_watch.py,
cli/roll_cmd.py), `chat` and `bench` go through its router; every other command refuses one
where inventories are parsed (inventory.parse raises FleetNotSupported).
"""

from __future__ import annotations

from k3deploy.cluster import fleet as fleet_mod
from k3deploy.cluster import inventory, sizing
from k3deploy.core import log as klog
from k3deploy.core.errors import EXIT_OK, EXIT_STEP_FAILED


def check_fleet(path: str, *, log_json: bool) -> int | None:
    """None for a one-group inventory (check then runs its preflight); for a fleet, 0 once it
    validates and its groups fit the model, 1 when they do not (as preflight's sizing), and
    InventoryError (exit 2) with every problem of an invalid one."""
    data = inventory.load_document(path)
    if not fleet_mod.is_fleet(data):
        return None
    fleet = fleet_mod.parse(data, path)
    # The arithmetic preflight does for one group (steps/checks/preflight.py _sizing): the
    # groups have one shape, so one answer holds for each.
    fits, sizing_line = sizing.fits_inventory_of(fleet.groups[0].inventory)
    lines = fleet_lines(fleet) + [f"each group: {sizing_line}"]
    if log_json:
        klog.get().info("fleet.valid" if fits else "fleet.does_not_fit", lines=lines)
    else:
        print("\n".join(lines))
    return EXIT_OK if fits else EXIT_STEP_FAILED


def fleet_lines(fleet: fleet_mod.Fleet) -> list[str]:
    first = fleet.groups[0].inventory
    router, node = fleet.router, fleet.router_node()
    out = [f"fleet {fleet.cluster}: {len(fleet.groups)} groups of {len(first.nodes)} nodes x "
           f"{first.gpu.count} {first.gpu.model} ({first.engine.kind}); router "
           f"{router.image} on {node.name} ({node.address}:{router.port}, policy "
           f"{router.policy}, health check every {router.health_check_interval} s)"]
    for group in fleet.groups:
        inv = group.inventory
        ranks = ", ".join(f"{n.name} (rank {r}{', head' if r == 0 else ''})"
                          for r, n in inv.ranked())
        out.append(f"  group {group.name} (cluster {inv.cluster}): {ranks}")
    out.append("valid; no node was contacted: the preflight of a fleet's nodes is not built "
               "yet (`up`, `status`, `verify`, `watch`, `roll`, `logs` and `down` run a fleet)")
    return out

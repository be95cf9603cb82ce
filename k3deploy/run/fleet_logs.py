"""`logs` on a fleet: each group's engine logs by the one-group step (collect-logs), each group
into a folder of its own, then the router's container output beside them (redacted, as every
log k3deploy writes)."""

from __future__ import annotations

import time
from pathlib import Path

from k3deploy.cluster import router_service as svc
from k3deploy.core import interrupt
from k3deploy.core.errors import EXIT_OK, EXIT_PARTIAL, EXIT_STEP_FAILED, K3Error
from k3deploy.node.session import endpoint_for
from k3deploy.node.router_host import RouterHost
from k3deploy.node.transport import NodeConnection
from k3deploy.run.fleet_run import FleetRun
from k3deploy.run.run_steps import single

ROUTER_LOG = "router.log"


def collect(run: FleetRun, out: str | None) -> int:
    """The folder: OUT, else the fleet's state dir's logs/<time>; group g's logs in OUT/g."""
    folder = Path(out) if out else run.dir / "logs" / time.strftime("%Y%m%d-%H%M%S")
    with interrupt.handling():
        codes = [run.group_run(g.name, "logs", single("collect-logs"),
                               {"out_dir": str(folder / g.name)}) for g in run.fleet.groups]
        codes.append(_router_log(run, folder))
    if EXIT_STEP_FAILED in codes:
        return EXIT_STEP_FAILED
    return EXIT_PARTIAL if EXIT_PARTIAL in codes else EXIT_OK


def _router_log(run: FleetRun, folder: Path) -> int:
    inv, node = svc.host_inventory(run.fleet), run.fleet.router_node()
    conn = NodeConnection(endpoint_for(inv, node), accept_new_host_keys=run.accept)
    try:
        text = RouterHost(conn, run.fleet.router, inv.paths.work).logs()
    except K3Error as err:
        run.say(f"router on {node.name}: its log could not be read: {err.lines()[0]}")
        return EXIT_PARTIAL
    finally:
        conn.close()
    if text is None:
        run.say(f"router on {node.name}: no router container, no log")
        return EXIT_OK
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / ROUTER_LOG
    path.write_text(text)
    run.say(f"router on {node.name}: {len(text.splitlines())} lines -> {path}")
    return EXIT_OK

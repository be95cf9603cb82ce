"""k3deploy status: what the state files say, next to what the nodes say now."""

from __future__ import annotations

import json
import time

from rich.console import Console
from rich.table import Table

from k3deploy.cli import cluster_state
from k3deploy.node import facts as F
from k3deploy.cluster import inventory as inventory_mod
from k3deploy.cli import status_cost, status_teardown
from k3deploy.core import group
from k3deploy.core.status import Status
from k3deploy.core.errors import EXIT_OK, EXIT_PARTIAL, EXIT_STEP_FAILED, K3Error, LockError
from k3deploy.node.identity import IDENTITY
from k3deploy.core.redact import redact_obj
from k3deploy.node.session import Session
from k3deploy.core.state import ClusterLock
from k3deploy.remote.protocol import WorkPaths
from k3deploy.steps import BRINGUP, TEARDOWN, probes, steps_in

# every registered step of a bring-up or a teardown, in registry order (steps/__init__.py)
STEPS = steps_in(BRINGUP) + steps_in(TEARDOWN)


def _live(session, inv, name: str, api_key: str | None) -> dict:
    probe = [probes.file_json("download", WorkPaths(inv.paths.work).progress), *IDENTITY,
             *cluster_state.live_probes(inv, inv.is_head(name), api_key)]
    try:
        found = F.gather(session.conn(name), probe)
    except K3Error as err:
        return {"reachable": False, "error": str(err)}
    return {"reachable": True, "container": probes.container_summary(found["container"]),
            "health": found.get(cluster_state.HEALTH),
            "download": found["download"], "incident": found["incident"],
            "identity": {f.name: found[f.name] for f in IDENTITY}}


def collect(inv_path: str, accept_new_host_keys: bool, state_dir: str | None) -> dict:
    inv = inventory_mod.load(inv_path)
    with Session(inv, accept_new_host_keys=accept_new_host_keys, state_dir=state_dir,
                 lock=False) as session:
        names = [n.name for n in inv.nodes]
        key = cluster_state.api_key(inv, session.state_dir)
        live = group.run_each(lambda n: _live(session, inv, n, key), names).unwrapped()
        idle = _no_run_active(session)
        nodes = {n: _node_view(inv.rank_of(n), live[n], session.states[n].data, idle)
                 for n in names}
    cluster = {"name": inv.cluster, **cluster_state.summarize(live)}
    return redact_obj({"cluster": cluster, "nodes": nodes, "run_active": not idle,
                       "cost": status_cost.view(inv, nodes, time.time())})


def _node_view(rank: int, live: dict, state: dict, idle: bool) -> dict:
    steps = _settled(state.get("steps", {}), idle)
    # The node answers as another machine (spot replacement): what the file says is history.
    replaced = bool(live.get("identity") and state.get("identity")
                    and live["identity"] != state["identity"])
    if replaced:
        steps = {name: {**rec, "status": Status.STALE} for name, rec in steps.items()}
    down = None if replaced else status_teardown.view(state)
    return {"rank": rank, "live": live, "state": status_teardown.mark(steps, down),
            "replaced": replaced, "torn_down": down}


def _no_run_active(session) -> bool:
    """True when no k3deploy run holds the cluster lock right now."""
    lock = ClusterLock(session.state_dir)
    try:
        lock.acquire()
    except LockError:
        return False
    lock.release()
    return True


def _settled(steps: dict, idle: bool) -> dict:
    """A step recorded as running while no run is active was interrupted (laptop killed)."""
    if not idle:
        return steps
    return {name: ({**rec, "status": Status.INTERRUPTED} if rec.get("status") == Status.RUNNING
                   else rec)
            for name, rec in steps.items()}


def _download_cell(live: dict) -> str:
    doc = live.get("download") or {}
    if not doc:
        return "-"
    pct = 100 * doc.get("bytes_done", 0) / max(1, doc.get("bytes_total", 1))
    cell = f"{doc.get('state')} {pct:.0f}% {doc.get('shards_done', 0)}/{doc.get('shards_total', 0)}"
    if "hub_bytes" in doc:  # from the Hub and from peers (fan-out), this downloader run
        cell += f" hub {doc['hub_bytes'] / 1e9:.2f} GB peers {doc.get('peer_bytes', 0) / 1e9:.2f} GB"
    return cell


def _step_columns(doc: dict) -> list[str]:
    """The steps some state file records (bring-up order first, then any other playbook's);
    all bring-up steps when nothing ran yet."""
    seen = [s for info in doc["nodes"].values() for s in info["state"]]
    ordered = [s for s in STEPS if s in seen] + [s for s in dict.fromkeys(seen) if s not in STEPS]
    return ordered or list(steps_in(BRINGUP))


def render(doc: dict) -> Table:
    table = Table(title=f"cluster {doc['cluster']['name']}")
    columns = _step_columns(doc)
    for col in ("node", "rank", *columns, "container", "download"):
        table.add_column(col)
    for name, info in doc["nodes"].items():
        live = info["live"]
        steps = [info["state"].get(s, {}).get("status", "-") for s in columns]
        container = "unreachable" if not live.get("reachable") else \
            (live.get("container") or {}).get("status") or "none"
        table.add_row(name, str(info["rank"]), *steps, container, _download_cell(live))
    return table


def run_status(inv_path: str, *, json_out: bool, accept_new_host_keys: bool,
               state_dir: str | None) -> int:
    doc = collect(inv_path, accept_new_host_keys, state_dir)
    if json_out:
        print(json.dumps(doc, indent=1, default=str))
    else:
        probe = Console()  # not a terminal: rich would squash the table into 80 columns
        console = Console(width=None if probe.is_terminal else max(probe.width, 160))
        if status_teardown.note(doc["nodes"]):
            console.print(f"cluster {doc['cluster']['name']}: {status_teardown.note(doc['nodes'])}",
                          markup=False, highlight=False, soft_wrap=True)
        console.print(render(doc))
        console.print(cluster_state.line(doc["cluster"]["name"], doc["cluster"]), markup=False)
        console.print(status_cost.line(doc["cost"]), markup=False, highlight=False)
    unreachable = any(not n["live"].get("reachable") for n in doc["nodes"].values())
    if unreachable:
        return EXIT_PARTIAL
    return EXIT_OK if doc["cluster"]["state"] == cluster_state.SERVING else EXIT_STEP_FAILED

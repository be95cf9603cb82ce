"""k3deploy status: what the state files say, next to what the nodes say now."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from rich.console import Console
from rich.table import Table

from k3deploy import facts as F
from k3deploy import inventory as inventory_mod
from k3deploy.errors import EXIT_OK, EXIT_PARTIAL, K3Error
from k3deploy.redact import redact_obj
from k3deploy.session import Session
from k3deploy.steps import probes

STEPS = ("preflight", "nvme", "download", "image", "launch", "wait", "verify", "teardown")


def _live(session, inv, name: str) -> dict:
    probe = [probes.container(inv.engine.container),
             probes.file_json("download", f"{inv.paths.work}/download-progress.json")]
    try:
        found = F.gather(session.conn(name), probe)
    except K3Error as err:
        return {"reachable": False, "error": str(err)}
    return {"reachable": True, "container": probes.container_summary(found["container"]),
            "download": found["download"]}


def collect(inv_path: str, accept_new_host_keys: bool, state_dir: str | None) -> dict:
    inv = inventory_mod.load(inv_path)
    with Session(inv, accept_new_host_keys=accept_new_host_keys, state_dir=state_dir,
                 lock=False) as session:
        names = [n.name for n in inv.nodes]
        with ThreadPoolExecutor(max_workers=min(32, len(names))) as pool:
            live = dict(zip(names, pool.map(lambda n: _live(session, inv, n), names)))
        nodes = {n: {"rank": inv.rank_of(n), "state": session.states[n].data.get("steps", {}),
                     "live": live[n]} for n in names}
    return redact_obj({"cluster": inv.cluster, "nodes": nodes})


def _download_cell(live: dict) -> str:
    doc = live.get("download") or {}
    if not doc:
        return "-"
    pct = 100 * doc.get("bytes_done", 0) / max(1, doc.get("bytes_total", 1))
    return f"{doc.get('state')} {pct:.0f}% {doc.get('shards_done', 0)}/{doc.get('shards_total', 0)}"


def render(doc: dict) -> Table:
    table = Table(title=f"cluster {doc['cluster']}")
    for col in ("node", "rank", *STEPS, "container", "download"):
        table.add_column(col)
    for name, info in doc["nodes"].items():
        live = info["live"]
        steps = [info["state"].get(s, {}).get("status", "-") for s in STEPS]
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
        Console().print(render(doc))
    unreachable = any(not n["live"].get("reachable") for n in doc["nodes"].values())
    return EXIT_PARTIAL if unreachable else EXIT_OK

"""k3deploy status: what the state files say, next to what the nodes say now."""

from __future__ import annotations

import dataclasses

import json
import shutil
import time
from typing import cast

from k3deploy.cli import cluster_state, status_docs, status_view
from k3deploy.node import facts as F
from k3deploy.cluster import inventory as inventory_mod
from k3deploy.cli import status_cost, status_fabric, status_teardown
from k3deploy.core import group
from k3deploy.facts import docker, http
from k3deploy.core.status import Status
from k3deploy.core.errors import EXIT_OK, EXIT_PARTIAL, EXIT_STEP_FAILED, K3Error, LockError
from k3deploy.cli.status_doc import Live, Looked, NodeDoc, StatusDoc
from k3deploy.cluster.inventory import Inventory
from k3deploy.core.jsonvalue import JSON
from k3deploy.core.state import StateDoc, StepRecord
from k3deploy.facts.docker import Container
from k3deploy.facts.http import Endpoint
from k3deploy.facts.nvidia_smi import Gpu
from k3deploy.node.identity import IDENTITY
from k3deploy.core.redact import redact_obj
from k3deploy.node.session import Session
from k3deploy.core.state import ClusterLock
from k3deploy.remote import protocol
from k3deploy.run.playbook import load as load_playbook
from k3deploy.steps.fabric import fabric_mesh
from k3deploy.steps import guard as guard_step
from k3deploy.steps import BRINGUP, RAY_STEPS, TEARDOWN, probes, steps_in
from k3deploy.steps.engine import raylayout

# every registered step of a bring-up or a teardown, in registry order (steps/__init__.py)
STEPS = steps_in(BRINGUP) + steps_in(TEARDOWN)
GUARD = "guard."   # the guard step's facts, under their own names in status's one batch


def bringup_order() -> list[str]:
    """The bring-up playbook's steps in its order: the rows of `--steps`."""
    return [s.label for s in load_playbook("bringup")[1]]


def applicable(steps: list[str], inv: Inventory) -> list[str]:
    """The steps this inventory's engine runs: the Ray ones only for vLLM over Ray."""
    return [s for s in steps if s.partition("#")[0] not in RAY_STEPS or raylayout.in_use(inv)]


def guard_label(facts: guard_step.GuardFacts, enabled: bool) -> str:
    """watching / fired / stale (alive, not beating) / stopped (its state says watching, its
    process is gone) / not running / off."""
    if not enabled:
        return "off"
    if not facts.guard_pids:
        if facts.spent:
            return "fired"
        return protocol.STOPPED if facts.reading().state == protocol.STOPPED else "not running"
    if facts.beat_age() >= guard_step.BEAT_STALE:
        return "stale"
    return (facts.guard_state.phase if facts.guard_state else "") or "starting"


def _live(session: Session, inv: Inventory, name: str, api_key: str | None,
          detail: bool = True) -> Looked:
    """detail: also the GPUs' memory and the guard (what status shows per node; watch, which
    looks every few seconds for the cluster's state only, spares the nodes nvidia-smi)."""
    probe = [probes.engine_container(inv),
             probes.download_reading(inv), *IDENTITY,
             *cluster_state.live_probes(inv, inv.is_head(name), api_key)]
    if detail:
        probe += [probes.gpus(), *F.renamed(guard_step.guard_facts(inv), GUARD),
                  *status_fabric.facts(inv, inv.is_head(name))]
    try:
        found = F.gather(session.conn(name), probe)
    except K3Error as err:
        return {"reachable": False, "error": str(err)}
    # the batch's values by fact name, each of the type its parser returns
    container, health = found["container"], found.get(cluster_state.HEALTH)
    download, incident = found["download"], found["incident"]
    live: Looked = {"reachable": True,
                    "container": container if isinstance(container, Container) else None,
                    "health": health if isinstance(health, Endpoint) else None,
                    "download": status_docs.download_view(download)
                    if isinstance(download, protocol.Reading) else None,
                    "incident": incident if isinstance(incident, dict) else None,
                    # IDENTITY's facts parse to text; a node that did not answer has none
                    "identity": {f.name: v if isinstance(v := found[f.name], str) else None
                                 for f in IDENTITY}}
    if detail:
        found_gpus = found["gpus"]
        live["gpus"] = [dataclasses.asdict(g) for g in found_gpus if isinstance(g, Gpu)] \
            if isinstance(found_gpus, tuple) else []
        guard_facts = guard_step.looked(found, GUARD)
        live["guard"] = guard = guard_label(guard_facts, inv.guard.enabled)
        live["fabric"] = status_fabric.node_view(found)
        if guard == protocol.STOPPED:
            live["guard_last_seen"] = status_docs.last_seen(guard_facts.reading())
    return live


def collect(inv_path: str | Inventory, accept_new_host_keys: bool, state_dir: str | None,
            detail: bool = True) -> StatusDoc:
    """inv_path: the inventory's file, or one already parsed (a fleet's group)."""
    inv = inv_path if isinstance(inv_path, Inventory) else inventory_mod.load(inv_path)
    with Session(inv, accept_new_host_keys=accept_new_host_keys, state_dir=state_dir,
                 lock=False) as session:
        names = [n.name for n in inv.nodes]
        key = cluster_state.api_key(inv, session.state_dir)
        live = group.run_each(lambda n: _live(session, inv, n, key, detail), names).unwrapped()
        idle = _no_run_active(session)
        nodes = {n: _node_view(inv.rank_of(n), live[n], session.states[n].data, idle)
                 for n in names}
        fabric = fabric_mesh.kept(session.states[inv.head.name].data)
    doc: StatusDoc = {"cluster": {"name": inv.cluster, **cluster_state.summarize(live),
                                  **status_fabric.cluster_view(live)},
                      "nodes": nodes, "fabric": fabric, "run_active": not idle,
                      "cost": status_cost.view(inv, nodes, time.time())}
    return _redacted(doc)


def _redacted(doc: StatusDoc) -> StatusDoc:
    # redact_obj copies a JSON document with its strings masked and nothing else changed, and
    # the status document is one (no tuples in it: redact_obj would make them lists)
    return cast(StatusDoc, redact_obj(cast(JSON, doc)))


def _document(live: Looked) -> Live:
    """The record for the document: the container's and /health's fields (facts/docker.py
    and facts/http.py summary), for --json; an unreachable node says only why."""
    if "container" not in live and "health" not in live:
        # the two keys whose types differ are absent (an unreachable node): one record serves
        return cast(Live, live)
    return {**live, "container": docker.summary(live.get("container")),
            "health": http.summary(live.get("health"))}


def _node_view(rank: int, looked: Looked, state: StateDoc, idle: bool) -> NodeDoc:
    live = _document(looked)
    steps = _settled(state.get("steps", {}), idle)
    # The node answers as another machine (spot replacement): what the file says is history.
    replaced = bool(live.get("identity") and state.get("identity")
                    and live["identity"] != state["identity"])
    if replaced:
        steps = {name: {**rec, "status": Status.STALE} for name, rec in steps.items()}
    down = None if replaced else status_teardown.view(state)
    return {"rank": rank, "live": live, "state": status_teardown.mark(steps, down),
            "replaced": replaced, "torn_down": down}


def _no_run_active(session: Session) -> bool:
    """True when no k3deploy run holds the cluster lock right now."""
    lock = ClusterLock(session.state_dir)
    try:
        lock.acquire()
    except LockError:
        return False
    lock.release()
    return True


def _settled(steps: dict[str, StepRecord], idle: bool) -> dict[str, StepRecord]:
    """A step recorded as running while no run is active was interrupted (laptop killed)."""
    if not idle:
        return steps
    return {name: ({**rec, "status": Status.INTERRUPTED} if rec.get("status") == Status.RUNNING
                   else rec)
            for name, rec in steps.items()}


def step_order(doc: StatusDoc, inv: Inventory) -> list[str]:
    """The steps some state file records (bring-up order first, then any other playbook's);
    the bring-up's when nothing ran yet; only those the inventory's engine runs."""
    bringup = bringup_order()
    seen = [s for info in doc["nodes"].values() for s in info["state"]]
    known = bringup + [s for s in STEPS if s not in bringup]
    ordered = [s for s in known if s in seen] + [s for s in dict.fromkeys(seen) if s not in known]
    return applicable(ordered or bringup, inv)


def run_status(inv_path: str, *, json_out: bool, accept_new_host_keys: bool,
               state_dir: str | None, steps: bool = False) -> int:
    doc = collect(inv_path, accept_new_host_keys, state_dir)
    if json_out:
        print(json.dumps(doc, indent=1, default=str))
    else:
        print("\n".join(text(doc, inventory_mod.load(inv_path), steps)))
    return exit_code(doc)


def text(doc: StatusDoc, inv: Inventory, steps: bool = False) -> list[str]:
    # A pipe has no width: the design's 100 columns (COLUMNS still wins, as for any tool).
    width = shutil.get_terminal_size((100, 24)).columns
    return status_view.render(doc, step_order(doc, inv), width=width, steps=steps)


def exit_code(doc: StatusDoc) -> int:
    unreachable = any(not n["live"].get("reachable") for n in doc["nodes"].values())
    if unreachable:
        return EXIT_PARTIAL
    return EXIT_OK if doc["cluster"]["state"] == cluster_state.SERVING else EXIT_STEP_FAILED

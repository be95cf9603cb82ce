"""What state the cluster is in, decided here only: serving, stopped by the guard (since when,
the first failure and its cause), down, or in between, from every node's live facts; and torn
down, from a node's state file.

The two views of "down" are decided side by side so they cannot drift apart: live, no rank's
engine container runs; recorded, a teardown removed the engine after the last engine step
(k3deploy.steps.ENGINE_STEPS) ran. Pure functions, so `status` and `watch` agree on one answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NotRequired, TypedDict

from pathlib import Path

from k3deploy.cli.status_doc import Looked, Observed
from k3deploy.cluster.inventory import Inventory
from k3deploy.core.jsonvalue import JSON
from k3deploy.core.state import StateDoc, TornDown
from k3deploy.node import facts as F
from k3deploy.core.errors import BadInputError
from k3deploy.core.status import Status
from k3deploy.node import apikey, guard_config
from k3deploy.steps import ENGINE_STEPS, probes
from k3deploy.steps.engine import serves

SERVING, STOPPED, DOWN = "serving", "stopped-by-guard", "down"
DEGRADED, UNREACHABLE = "degraded", "unreachable"
LABELS = {SERVING: "serving", STOPPED: "stopped by the guard", DOWN: "down",
          DEGRADED: "degraded (not every rank's engine runs, or the head does not answer "
                    "/health; no guard incident)",
          UNREACHABLE: "unknown (a node is unreachable, no guard incident on the others)"}
HEALTH = serves.HEALTH   # the head's /health in status's live record
TORN_DOWN = Status.TORN_DOWN   # an engine step's status in `status` once a teardown undid it


def engine_step(label: str) -> bool:
    """A step a teardown undoes, by its label in the state file (`name#2` included)."""
    return label.partition("#")[0] in ENGINE_STEPS


def torn_down(state: StateDoc) -> TornDown | None:
    """One node's teardown record ({"at", "logs"}), unless an engine step ran after it (the
    cluster is up again)."""
    rec = state.get("torn_down")
    if not rec:
        return None
    later = [s.get("finished") or 0 for label, s in state.get("steps", {}).items()
             if engine_step(label) and s.get("status") not in (TORN_DOWN, Status.NEVER)]
    return rec if rec["at"] > max(later, default=0) else None


def live_probes(inv: Inventory, is_head: bool, api_key: str | None) -> list[F.Fact[object]]:
    """Added to status's one round trip per node: the guard's incident, and what
    steps/engine/serves.py needs (the engine container, the head's /health)."""
    return [probes.file_json("incident", guard_config.node_paths(inv).incident, sudo=True),
            *serves.facts(inv, is_head, api_key)]


def api_key(inv: Inventory, state_dir: Path) -> str | None:
    """The endpoint's key for the /health probe; None when status cannot know it (never made)."""
    try:
        return apikey.load_or_create(inv, state_dir, create=False)
    except BadInputError:   # engine.api_key_env not exported in this shell
        return None


class _State(TypedDict):
    state: str
    incident: dict[str, JSON] | None
    since: NotRequired[str]
    recorded_on: NotRequired[list[JSON]]


def _text(doc: Mapping[str, JSON], key: str) -> str:
    """A text field of a guard's incident document; "" when it is missing."""
    value = doc.get(key)
    return value if isinstance(value, str) else ""


def _failure(incident: Mapping[str, JSON]) -> dict[str, JSON]:
    failure = incident.get("failure")
    return failure if isinstance(failure, dict) else {}


def summarize(nodes: Mapping[str, Looked]) -> _State:
    """nodes: name -> status's live record (reachable, container, incident)."""
    lives = [n for n in nodes.values()]
    incidents = [i for n in lives if n.get("reachable") and (i := n.get("incident"))]
    if incidents:
        first = min(incidents, key=lambda i: _text(_failure(i), "at"))
        since = min(_text(i, "recorded_at") for i in incidents)
        return {"state": STOPPED, "since": since, "incident": first,
                "recorded_on": sorted((i.get("recorded_by") for i in incidents), key=str)}
    if any(not n.get("reachable") for n in lives):
        return {"state": UNREACHABLE, "incident": None}
    return {"state": _engines(lives), "incident": None}


def _engines(lives: list[Looked]) -> str:
    """Live: down when no rank's engine container runs, serving as steps/engine/serves.py decides."""
    running = [serves.engine_running(n.get("container")) for n in lives]
    health = next((h for n in lives if (h := n.get("health")) is not None), None)
    return SERVING if serves.serves(len(lives), running, health) else \
        DOWN if not any(running) else DEGRADED


def line(name: str, cluster: Observed) -> str:
    """One line for people: what state, and for an incident, since when and why."""
    return "; ".join(parts(name, cluster))


def parts(name: str, cluster: Observed) -> list[str]:
    """line's parts: the state (and since when), the first failure, what to do."""
    text = f"cluster {name}: {LABELS.get(cluster['state'], cluster['state'])}"
    incident = cluster.get("incident")
    if not incident:
        return [text]
    failure = _failure(incident)
    return [f"{text} since {cluster.get('since')}",
            f"first failure: {failure.get('cause')} at {failure.get('at')} "
            f"(seen by {incident.get('seen_by')})", "`k3deploy up` brings the group back"]

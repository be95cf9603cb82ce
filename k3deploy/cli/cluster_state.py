"""The cluster at a glance, from what `status` saw on each node: serving, stopped by the guard
(since when, the first failure and its cause), down, or in between.

Pure functions over per-node live facts, so `status` and `watch` agree on one answer.
"""

from __future__ import annotations

from k3deploy.node import facts as F
from k3deploy.node import guard_config
from k3deploy.steps import probes

SERVING, STOPPED, DOWN = "serving", "stopped-by-guard", "down"
DEGRADED, UNREACHABLE = "degraded", "unreachable"
LABELS = {SERVING: "serving", STOPPED: "stopped by the guard", DOWN: "down",
          DEGRADED: "degraded (not every rank's engine runs, no guard incident)",
          UNREACHABLE: "unknown (a node is unreachable, no guard incident on the others)"}


def live_probes(inv) -> list[F.Fact]:
    """Added to status's one round trip per node."""
    return [probes.file_json("incident", guard_config.node_paths(inv)["incident"], sudo=True)]


def summarize(nodes: dict[str, dict]) -> dict:
    """nodes: name -> status's live record (reachable, container, incident)."""
    lives = [n for n in nodes.values()]
    incidents = [n["incident"] for n in lives if n.get("reachable") and n.get("incident")]
    if incidents:
        first = min(incidents, key=lambda i: (i.get("failure") or {}).get("at") or "")
        since = min(i.get("recorded_at") or "" for i in incidents)
        return {"state": STOPPED, "since": since, "incident": first,
                "recorded_on": sorted(i.get("recorded_by") for i in incidents)}
    if any(not n.get("reachable") for n in lives):
        return {"state": UNREACHABLE, "incident": None}
    running = [bool((n.get("container") or {}).get("running")) for n in lives]
    state = SERVING if all(running) else DOWN if not any(running) else DEGRADED
    return {"state": state, "incident": None}


def line(name: str, cluster: dict) -> str:
    """One line for people: what state, and for an incident, since when and why."""
    text = f"cluster {name}: {LABELS.get(cluster['state'], cluster['state'])}"
    incident = cluster.get("incident")
    if not incident:
        return text
    failure = incident.get("failure") or {}
    return (f"{text} since {cluster.get('since')}; first failure: {failure.get('cause')} at "
            f"{failure.get('at')} (seen by {incident.get('seen_by')}); "
            "`k3deploy up` brings the group back")

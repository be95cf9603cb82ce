"""What a certificate records from the cluster (steps/engine/certify.py): after `up`, from verify's
records in the state files (verify looked in its own round trip); after `bench`, afresh in one
SSH round trip per node. The verify results come from the state files."""

from __future__ import annotations

from k3deploy.core import group
from k3deploy.facts import record
from k3deploy.node import apikey
from k3deploy.node import facts as F
from k3deploy.steps.engine import certify
from k3deploy.steps.fabric import fabric_mesh


def collect(session, inv) -> dict:
    """Looks now: one round trip per node."""
    key = apikey.load_or_create(inv, session.state_dir, create=False)
    names = [n.name for _, n in inv.ranked()]

    def look(name: str) -> dict:
        probes = certify.node_probes(inv, inv.is_head(name), key)
        found = F.gather(session.conn(name), probes)
        return certify.node_record(record(certify.CertifyFacts, found))
    return {**summary(group.run_each(look, names).unwrapped(), inv),
            "fabric": fabric_mesh.kept(session.states[inv.head.name].data)}


def from_verify(session, inv) -> dict:
    """What verify recorded on each node in this run (nothing is asked of the nodes)."""
    per_node = {n.name: (session.states[n.name].step("verify").get("detail") or {})
                .get("certificate") or {} for _, n in inv.ranked()}
    return {**summary(per_node, inv),
            "fabric": fabric_mesh.kept(session.states[inv.head.name].data)}


def summary(per_node: dict[str, dict], inv) -> dict:
    head = per_node[inv.head.name]
    return {"head": head, "engine_version": head.get("engine_version"),
            "config_digests": {n: f.get("config_digest") for n, f in per_node.items()},
            "gpu_memory_mib": {n: {"rank": inv.rank_of(n),
                                   "used": [g["used_mib"] for g in f.get("gpus") or []],
                                   "total": [g["total_mib"] for g in f.get("gpus") or []]}
                               for n, f in per_node.items()},
            "started_at": {n: f.get("started_at") for n, f in per_node.items()}}


def verify_results(session) -> dict:
    out = {}
    for name, state in session.states.items():
        rec = state.data.get("steps", {}).get("verify") or {}
        out[name] = {"status": rec.get("status", "never"), "finished": rec.get("finished"),
                     "error": rec.get("last_error"), "detail": rec.get("detail")}
    return out

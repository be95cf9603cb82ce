"""What a certificate records from the cluster (steps/engine/certify.py): after `up`, from verify's
records in the state files (verify looked in its own round trip); after `bench`, afresh in one
SSH round trip per node. The verify results come from the state files."""

from __future__ import annotations

from k3deploy.cluster.inventory import Inventory
from k3deploy.core import group
from k3deploy.core.jsonvalue import JSON
from k3deploy.core.state import StepRecord
from k3deploy.facts import record
from k3deploy.node import apikey
from k3deploy.node import facts as F
from k3deploy.node.session import Session
from k3deploy.serving.certificate import ClusterFacts
from k3deploy.steps.engine import certify
from k3deploy.steps.fabric import fabric_mesh


def collect(session: Session, inv: Inventory) -> ClusterFacts:
    """Looks now: one round trip per node."""
    key = apikey.load_or_create(inv, session.state_dir, create=False)
    names = [n.name for _, n in inv.ranked()]

    def look(name: str) -> dict[str, JSON]:
        probes = certify.node_probes(inv, inv.is_head(name), key)
        found = F.gather(session.conn(name), probes)
        return certify.node_record(record(certify.CertifyFacts, found))
    return {**summary(group.run_each(look, names).unwrapped(), inv),
            "fabric": fabric_mesh.kept(session.states[inv.head.name].data)}


def from_verify(session: Session, inv: Inventory) -> ClusterFacts:
    """What verify recorded on each node in this run (nothing is asked of the nodes)."""
    per_node = {n.name: _object(_object(session.states[n.name].step("verify").get("detail"))
                                .get("certificate")) for _, n in inv.ranked()}
    return {**summary(per_node, inv),
            "fabric": fabric_mesh.kept(session.states[inv.head.name].data)}


def _object(value: JSON) -> dict[str, JSON]:
    """A record of a state file or of certify.node_record: {} when missing."""
    return value if isinstance(value, dict) else {}


def _gpus(record: dict[str, JSON], key: str) -> list[JSON]:
    gpus = record.get("gpus") or []
    return [g[key] for g in gpus if isinstance(g, dict)] if isinstance(gpus, list) else []


def summary(per_node: dict[str, dict[str, JSON]], inv: Inventory) -> ClusterFacts:
    head = per_node[inv.head.name]
    return {"head": head, "engine_version": head.get("engine_version"),
            "config_digests": {n: f.get("config_digest") for n, f in per_node.items()},
            "gpu_memory_mib": {n: {"rank": inv.rank_of(n), "used": _gpus(f, "used_mib"),
                                   "total": _gpus(f, "total_mib")}
                               for n, f in per_node.items()},
            "started_at": {n: f.get("started_at") for n, f in per_node.items()}}


def verify_results(session: Session) -> dict[str, JSON]:
    out: dict[str, JSON] = {}
    for name, state in session.states.items():
        rec: StepRecord = state.data.get("steps", {}).get("verify") or {}
        out[name] = {"status": rec.get("status", "never"), "finished": rec.get("finished"),
                     "error": rec.get("last_error"), "detail": rec.get("detail")}
    return out

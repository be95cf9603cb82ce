"""status's fabric lines: the NCCL transport each rank's log names, the devices it uses, and
the warning when a multi-node group talks over sockets while the nodes have HCAs."""

from __future__ import annotations

from k3deploy.facts.fabric import node_fabric
from k3deploy.steps import probes

# NCCL over TCP sockets moves a few GB/s per node where 4-8 NDR HCAs move 50-100 GB/s
# (NVIDIA/nccl#1676: all-reduce fell from ~180 to ~10 GB/s when the RDMA path was lost).
SOCKET_COST = ("a multi-node group on TCP sockets runs its all-reduce at a fraction of the "
               "HCAs' bandwidth (NVIDIA/nccl#1676: ~180 -> ~10 GB/s)")


def facts(inv) -> list:
    return [probes.nccl_transport(inv), *probes.fabric_facts()]


def node_view(found: dict) -> dict:
    t, fab = found.get("nccl"), node_fabric(found)
    return {"nccl_transport": t.transport if t else None,
            "nccl_devices": list(t.devices) if t else [], "gpudirect": t.gpudirect if t else None,
            "hcas": list(fab.hcas) if fab else []}


def cluster_view(live: dict[str, dict]) -> dict:
    """The group's transport (one value when every rank that printed one agrees) and the
    warning for sockets while HCAs exist; one node alone talks over no network."""
    seen = {v["fabric"]["nccl_transport"] for v in live.values()
            if v.get("fabric") and v["fabric"]["nccl_transport"]}
    transport = seen.pop() if len(seen) == 1 else (sorted(seen) if seen else None)
    hcas = [n for n, v in live.items() if v.get("fabric") and v["fabric"]["hcas"]]
    warning = None
    if transport == "Socket" and len(live) > 1 and hcas:
        warning = f"NCCL uses sockets while {', '.join(hcas)} have HCAs: {SOCKET_COST}"
    return {"nccl_transport": transport, "fabric_warning": warning}

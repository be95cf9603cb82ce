"""status's fabric lines: the NCCL transport each rank's log names, the devices it uses, and
the warning when a multi-node group talks over sockets while the nodes have HCAs
(steps/fabric/fabric_check.py decides both)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict

from k3deploy.cli.status_doc import FabricView, Looked
from k3deploy.cluster.inventory import Inventory
from k3deploy.facts.fabric import node_fabric
from k3deploy.facts.nccl import NcclTransport
from k3deploy.node import facts as F
from k3deploy.steps.fabric import fabric_check


class ClusterFabric(TypedDict):
    nccl_transport: str | list[str] | None
    fabric_warning: str | None


def facts(inv: Inventory, is_head: bool) -> list[F.Fact[object]]:
    return fabric_check.transport_facts(inv, is_head)


def node_view(found: Mapping[str, object]) -> FabricView:
    """From status's batch, by fact name (each value of its parser's type)."""
    t, fab = found.get("nccl"), node_fabric(found)
    t = t if isinstance(t, NcclTransport) else None
    return {"nccl_transport": t.transport if t else None,
            "nccl_devices": list(t.devices) if t else [], "gpudirect": t.gpudirect if t else None,
            "gpudirect_evidence": t.gpudirect_evidence if t else None,
            "hcas": list(fab.hcas) if fab else []}


def cluster_view(live: Mapping[str, Looked]) -> ClusterFabric:
    views = {n: view for n, v in live.items() if (view := v.get("fabric"))}
    transports = {n: v["nccl_transport"] for n, v in views.items()}
    hcas = [n for n, v in views.items() if v["hcas"]]
    return {"nccl_transport": fabric_check.group_transport(transports),
            "fabric_warning": fabric_check.socket_warning(transports, hcas)}

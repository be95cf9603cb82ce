"""preflight's GPU-to-HCA findings, from `nvidia-smi topo -m` (facts/topology.py): a GPU whose
nearest HCA is across the CPU interconnect, HCAs that the GPUs' PCIe tree does not show, and
nodes laid out unlike the others. Warnings, as for GPUDirect RDMA off: the group still runs,
only slower. Asked before a launch only (a cluster probe, as the port mesh): a cluster that
serves has its layout, and a no-op `up` runs `nvidia-smi` once per node.

NCCL 2.x src/graph/paths.cc ncclTopoCheckGdr: `netGdrLevel = PATH_PXB` unless
NCCL_NET_GDR_LEVEL says otherwise, and "GPU Direct RDMA Disabled for GPU %d / HCA %lx (distance
%d > %d)" past it: a GPU-HCA path through the CPU stages every transfer in host memory."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Protocol

from k3deploy.core.errors import K3Error
from k3deploy.engines.fabric import sockets_only
from k3deploy.facts import topology
from k3deploy.facts.fabric import IbPort, NodeFabric
from k3deploy.facts.topology import Topology
from k3deploy.node.context import RunContext
from k3deploy.steps.base import ClusterProbe
from k3deploy.steps.checks.sameness import majority

PROBE = topology.probe()
KEY = PROBE.name


class FabricFound(Protocol):
    """What of a step's facts says the node's fabric: probes.fabric_facts' three."""

    @property
    def ib_ports(self) -> tuple[IbPort, ...] | None: ...
    @property
    def ib_devices(self) -> tuple[str, ...] | None: ...
    @property
    def gpudirect_rdma(self) -> bool: ...


class TopologyFound(FabricFound, Protocol):
    """Preflight's facts these warnings read: the fabric and `nvidia-smi topo -m` (None: not
    asked, or no matrix; a K3Error: the node's command did not run)."""

    @property
    def gpu_nic_topology(self) -> Topology | K3Error | None: ...


def probes_before_launch(run: RunContext, names: list[str], serving: bool) -> dict[str, ClusterProbe]:
    """`nvidia-smi topo -m` on every node, unless the cluster serves (its group formed over
    this layout; asked again before the next launch) or engine.fabric is socket (no HCA)."""
    if serving or sockets_only(run.inv.engine.fabric):
        return {}
    return {n: ClusterProbe(KEY, ("sh", "-c", PROBE.script),
                            lambda res: PROBE.parse(res.stdout, res.exit_code))
            for n in names}


def layout(found: TopologyFound) -> Topology | None:
    topo = found.gpu_nic_topology
    return topo if isinstance(topo, Topology) else None


def unread(all_facts: Mapping[str, TopologyFound]) -> list[tuple[str, str, str]]:
    """A node whose `nvidia-smi topo -m` did not run (it went away after its look)."""
    return [(n, "fabric", f"{PROBE.script}: {f.gpu_nic_topology}")
            for n, f in all_facts.items() if isinstance(f.gpu_nic_topology, K3Error)]


def node_fabric(found: FabricFound) -> NodeFabric | None:
    """The node's fabric; None when sysfs was not read."""
    if found.ib_ports is None:
        return None
    return NodeFabric(tuple(found.ib_ports), tuple(found.ib_devices or ()), found.gpudirect_rdma)


def warnings(all_facts: Mapping[str, TopologyFound]) -> list[str]:
    out = []
    for name, facts in all_facts.items():
        fab = node_fabric(facts)
        out += node_warnings(name, layout(facts), fab.hcas if fab else ())
    return out + differ_warnings({n: topo for n, f in all_facts.items() if (topo := layout(f))})


def node_warnings(name: str, topo: Topology | None, hcas: tuple[str, ...]) -> list[str]:
    """One node: HCAs in sysfs (active ports) against what the GPUs' topology shows."""
    if topo is None or not hcas:
        return []
    if not topo.nics:
        return [f"warning: {name} has HCAs ({', '.join(hcas)}) but `nvidia-smi topo -m` shows "
                "no NIC beside its GPUs: NCCL cannot pair a GPU with a near HCA and may send "
                "through host memory; check the HCAs are PCIe functions of this host (`lspci | "
                "grep -i mellanox`) and the NVIDIA driver is current"]
    far: dict[tuple[str, ...], list[int]] = {}
    for g in topo.nearest:
        if g.path == "SYS":
            far.setdefault(g.nics, []).append(g.gpu)
    return [f"warning: {name}: {_gpus(gpus)} reach their nearest HCA ({'/'.join(nics)}) only "
            "across the CPU interconnect (SYS): their traffic crosses the sockets and NCCL "
            "turns GPUDirect RDMA off for it (default NCCL_NET_GDR_LEVEL PXB); seat an HCA "
            "under that CPU socket's PCIe, or move the card to one of its slots"
            for nics, gpus in far.items()]


def differ_warnings(topos: dict[str, Topology]) -> list[str]:
    """The nodes whose GPU-to-HCA layout differs from the majority's; all listed when none."""
    signatures = {n: t.signature for n, t in topos.items()}
    if len(set(signatures.values())) <= 1:
        return []
    common = majority(signatures)
    if common is None:
        shown = "; ".join(f"{n}: {summary(t)}" for n, t in topos.items())
        return [f"warning: the GPU-to-HCA topology differs between the nodes ({shown}) and no "
                f"majority says which is usual: {_WHY}"]
    usual = next(t for t in topos.values() if t.signature == common)
    odd = [n for n, s in signatures.items() if s != common]
    shown = "; ".join(f"{n}: {summary(topos[n])}" for n in odd)
    return [f"warning: the GPU-to-HCA topology of {', '.join(odd)} differs from the other "
            f"nodes' ({shown}; the others: {summary(usual)}): {_WHY}"]


# NCCL lays its rings and trees out per node from this topology; a node that differs runs
# other paths, and the slowest rank paces every all-reduce.
_WHY = ("NCCL's rings through that node take other PCIe paths and the slowest paces every "
        "all-reduce; compare `nvidia-smi topo -m` there (an HCA missing, a card in another slot)")


def summary(topo: Topology) -> str:
    """The layout in a few words: the HCA count and how many GPUs reach theirs by which path."""
    if not topo.nics:
        return f"{len(topo.gpus)} GPUs, no NIC"
    counts = Counter(g.path for g in topo.nearest)
    return f"{len(topo.nics)} HCAs, nearest: " + ", ".join(f"{n} GPUs {p}" for p, n in counts.items())


def _gpus(gpus: list[int]) -> str:
    return ", ".join(f"GPU{g}" for g in gpus)

"""preflight's fabric findings: HCAs on some nodes only, a port down, rates that differ,
GPUDirect RDMA off (a warning), `engine.fabric: ib` without an HCA, and the interface
NCCL/Gloo are told to use against the one the route to the other nodes takes.

NCCL_SOCKET_IFNAME (NCCL docs, env.html): a comma list of prefixes ("eth" matches eth0),
"=" before the list for exact names, "^" to exclude; GLOO_SOCKET_IFNAME is one exact name
(torch.distributed). `lo` never reaches another node."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from k3deploy.cluster.inventory import Inventory, Node
from k3deploy.engines.fabric import ib_hca_value, sockets_only
from k3deploy.facts import gpudirect
from k3deploy.facts.fabric import NodeFabric
from k3deploy.facts.nccl import NcclTransport
from k3deploy.facts.topology import Topology
from k3deploy.node import facts as F
from k3deploy.steps.base import AnyFact
from k3deploy.node.context import NodeContext, RunContext
from k3deploy.node.host_facts import Route, route_to
from k3deploy.steps import probes
from k3deploy.steps.fabric import fabric_topology
from k3deploy.steps.fabric.fabric_topology import FabricFound, node_fabric

IFNAME_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")


class RouteFound(FabricFound, Protocol):
    """What of preflight's facts the node's findings read: the fabric, and the route to a
    peer (absent on a node alone)."""

    @property
    def route_to_peer(self) -> Route | None: ...


class TransportFound(FabricFound, Protocol):
    """What of verify's facts its closing lines read: the fabric, and NCCL's transport."""

    @property
    def nccl(self) -> NcclTransport | None: ...


def facts(node: NodeContext) -> list[AnyFact]:
    peer = _peer(node)
    return probes.fabric_facts() + [F.from_probe(gpudirect.probe())] + \
        ([route_to("route_to_peer", peer)] if peer else [])


def _peer(node: NodeContext) -> str | None:
    """The head's private address; on the head, rank 1's (the route to itself is lo)."""
    others = [n for n in node.inv.nodes if n.name != node.name]
    if not others:
        return None
    return node.inv.head.self_ip if not node.is_head else others[0].self_ip


def ifnames(inv: Inventory, n: Node) -> dict[str, str]:
    """What the engine is told per variable: engine.env wins over nodes[].nic."""
    env = inv.engine.env
    return {var: str(env.get(var, n.nic)) for var in IFNAME_VARS}


def matches(var: str, value: str, dev: str) -> bool:
    if var == "GLOO_SOCKET_IFNAME":
        return value == dev
    exclude, exact = value.startswith("^"), False
    value = value.lstrip("^")
    if value.startswith("="):
        exact, value = True, value[1:]
    hit = any((dev == p) if exact else dev.startswith(p) for p in value.split(",") if p)
    return hit != exclude


def problems(facts: RouteFound, node: NodeContext) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    fab = node_fabric(facts)
    if node.inv.engine.fabric == "ib" and not (fab and fab.usable):
        out.append(("fabric", "engine.fabric is ib but this node has no HCA with an active port "
                    "and a /dev/infiniband/uverbs device; install the RDMA driver (rdma-core, "
                    "MLNX_OFED/DOCA) or set engine.fabric: auto"))
    if fab and not sockets_only(node.inv.engine.fabric):
        # a port of the other link layer (an Ethernet front end or storage NIC) is not NCCL's
        layer = fab.nccl_layer()
        out += [("fabric", f"{p.label} ({p.link_layer}) is {p.state}: NCCL leaves it out; check its cable and "
                 f"switch port (ibstat {p.device})") for p in fab.ports
                if not p.active and layer in (None, p.link_layer)]
    route = facts.route_to_peer
    for var, value in ifnames(node.inv, node.node).items():
        if value == "lo" or (route and route.dev == "lo" and matches(var, value, "lo")):
            out.append(("fabric", f"{var}={value} names the loopback: the other ranks cannot "
                        "reach it; set nodes[].nic (or engine.env) to the private interface"))
        elif route and route.dev and not matches(var, value, route.dev):
            out.append(("fabric", f"{var}={value} but the route to the other nodes leaves by "
                        f"{route.dev} (ip route get {_peer(node)}); set nodes[].nic to "
                        f"{route.dev} or fix the routing table"))
    return out


def cluster_problems(all_facts: Mapping[str, FabricFound],
                     run: RunContext) -> list[tuple[str, str, str]]:
    if sockets_only(run.inv.engine.fabric) or len(all_facts) < 2:
        return []
    fabs: dict[str, NodeFabric | None] = {n: node_fabric(f) for n, f in all_facts.items()}
    with_ib = sorted(n for n, f in fabs.items() if f and f.usable)
    out: list[tuple[str, str, str]] = []
    if with_ib and len(with_ib) < len(fabs):
        without = sorted(set(fabs) - set(with_ib))
        out.append(("cluster", "fabric", f"HCAs on {', '.join(with_ib)} only, none usable on "
                    f"{', '.join(without)}: NCCL falls back to sockets for the whole group; "
                    "fix the RDMA driver there or set engine.fabric: socket"))
    # an unread rate (None) sorts first
    rates = {n: sorted({p.rate_gbps for p in f.ports if p.active}, key=_rate_order)
             for n, f in fabs.items() if f and f.usable}
    if len({tuple(r) for r in rates.values()}) > 1:
        shown = "; ".join(f"{n}: {'/'.join(f'{r:g}' for r in v)} Gb/s" for n, v in rates.items())
        out.append(("cluster", "fabric", f"HCA rates differ ({shown}): the slowest link paces "
                    "every all-reduce; check the cables and switch ports of the slower nodes"))
    return out


def _rate_order(rate: float | None) -> float:
    return -1.0 if rate is None else rate


def warnings(all_facts: Mapping[str, fabric_topology.TopologyFound], run: RunContext) -> list[str]:
    """GPUDirect RDMA off (or unknown) where HCAs are used: NCCL stages through host memory;
    then mixed link layers and the GPU-to-HCA topology's findings."""
    if sockets_only(run.inv.engine.fabric):
        return []
    return gpudirect_warnings(all_facts) + layer_warnings(all_facts) + \
        fabric_topology.warnings(all_facts)


def gpudirect_warnings(all_facts: Mapping[str, fabric_topology.TopologyFound]) -> list[str]:
    """nvidia_peermem or DMA-BUF (facts/gpudirect.py): "off" only when the node rules both out,
    "unknown" when nothing says; NCCL's own lines decide once it runs (`status`)."""
    said = {n: gpudirect.support(fab.gpudirect_rdma, getattr(f, "gpu_dmabuf", None))
            for n, f in all_facts.items() if (fab := node_fabric(f)) and fab.usable}
    out = []
    for verdict, text in ((False, "off"), (None, "unknown")):
        names = sorted(n for n, (v, _) in said.items() if v is verdict)
        if names:
            why = "; ".join(sorted({said[n][1] for n in names}))
            out.append(f"warning: GPUDirect RDMA is {text} on {', '.join(names)} ({why}): "
                       + ("NCCL copies through host memory; `modprobe nvidia_peermem`, or the "
                          "open GPU kernel modules on Linux >= 5.12 for DMA-BUF" if verdict is False
                          else "NCCL says at its init: `k3deploy status` shows gpudirect"))
    return out


def layer_warnings(all_facts: Mapping[str, fabric_topology.TopologyFound]) -> list[str]:
    """A node whose active ports are of two link layers (InfiniBand HCAs beside an up Ethernet
    front end): NCCL given both fails to connect ("NET/IB : Attempted to connect incompatible
    devices", NVIDIA/nccl src/transport/net_ib/connect.cc:985-990), so the launch names one
    layer's devices exactly (engines/fabric.py ib_hca_value)."""
    out: list[str] = []
    for name, found in all_facts.items():
        fab = node_fabric(found)
        if not (fab and fab.usable and len(fab.active_by_layer) > 1):
            continue
        shown = "; ".join(f"{layer} {', '.join(ports)}" for layer, ports in fab.active_by_layer.items())
        keep = fab.nccl_layer()
        line = (f"warning: {name}'s active ports mix link layers ({shown}): NCCL connects only "
                f"devices of one; the launch gives it the {keep} ones, "
                f"NCCL_IB_HCA={ib_hca_value(fab.nccl_hcas())}")
        topo = fabric_topology.layout(found)
        nics = near_nics(topo) if topo else None
        near = keep if nics is None else fab.nccl_layer(nics)
        if nics is not None and near != keep:
            line += (f"; the HCAs nearest the GPUs (`nvidia-smi topo -m`) are {near}: to use "
                     f"them set engine.env NCCL_IB_HCA={ib_hca_value(fab.nccl_hcas(nics))}")
        out.append(line)
    return out


def near_nics(topo: Topology) -> tuple[str, ...]:
    """Each GPU's nearest HCAs in `nvidia-smi topo -m` (facts/topology.py)."""
    return tuple(n for g in topo.nearest for n in g.nics)


# NCCL over TCP sockets moves a few GB/s per node where 4-8 NDR HCAs move 50-100 GB/s
# (NVIDIA/nccl#1676: all-reduce fell from ~180 to ~10 GB/s when the RDMA path was lost).
SOCKET_COST = ("a multi-node group on TCP sockets runs its all-reduce at a fraction of the "
               "HCAs' bandwidth (NVIDIA/nccl#1676: ~180 -> ~10 GB/s)")


def group_transport(transports: dict[str, str | None]) -> str | list[str] | None:
    """One value when every rank that printed one agrees; the sorted list when they differ."""
    seen = {t for t in transports.values() if t}
    return seen.pop() if len(seen) == 1 else (sorted(seen) if seen else None)


def socket_warning(transports: dict[str, str | None], with_hcas: list[str]) -> str | None:
    """A multi-node group on sockets while nodes have HCAs; one node talks over no network."""
    if group_transport(transports) == "Socket" and len(transports) > 1 and with_hcas:
        return f"NCCL uses sockets while {', '.join(sorted(with_hcas))} have HCAs: {SOCKET_COST}"
    return None


def transport_facts(inv: Inventory, is_head: bool) -> list[AnyFact]:
    return [probes.nccl_transport(inv, is_head), *probes.fabric_facts()]


def transport_lines(all_facts: Mapping[str, TransportFound]) -> list[str]:
    """verify's lines: the group's transport and devices, and the sockets warning."""
    transports = {n: f.nccl.transport if f.nccl else None for n, f in all_facts.items()}
    if not any(transports.values()):
        return []
    hcas = [n for n, f in all_facts.items() if (fab := node_fabric(f)) and fab.hcas]
    devices = sorted({d for f in all_facts.values() if f.nccl for d in f.nccl.devices})
    line = f"NCCL transport: {group_transport(transports)} over {', '.join(devices) or '?'}"
    warning = socket_warning(transports, hcas)
    return [line] + ([f"warning: {warning}"] if warning else [])

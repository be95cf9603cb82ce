"""preflight's fabric findings: HCAs on some nodes only, a port down, rates that differ,
GPUDirect RDMA off (a warning), `engine.fabric: ib` without an HCA, and the interface
NCCL/Gloo are told to use against the one the route to the other nodes takes.

NCCL_SOCKET_IFNAME (NCCL docs, env.html): a comma list of prefixes ("eth" matches eth0),
"=" before the list for exact names, "^" to exclude; GLOO_SOCKET_IFNAME is one exact name
(torch.distributed). `lo` never reaches another node."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from k3deploy.engines.fabric import sockets_only
from k3deploy.facts.fabric import NodeFabric
from k3deploy.facts.nccl import NcclTransport
from k3deploy.node import facts as F
from k3deploy.node.context import NodeContext
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


def facts(node: NodeContext) -> list[F.Fact]:
    peer = _peer(node)
    return probes.fabric_facts() + ([route_to("route_to_peer", peer)] if peer else [])


def _peer(node: NodeContext) -> str | None:
    """The head's private address; on the head, rank 1's (the route to itself is lo)."""
    others = [n for n in node.inv.nodes if n.name != node.name]
    if not others:
        return None
    return node.inv.head.self_ip if not node.is_head else others[0].self_ip


def ifnames(inv, n) -> dict[str, str]:
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
    out, fab = [], node_fabric(facts)
    if node.inv.engine.fabric == "ib" and not (fab and fab.usable):
        out.append(("fabric", "engine.fabric is ib but this node has no HCA with an active port "
                    "and a /dev/infiniband/uverbs device; install the RDMA driver (rdma-core, "
                    "MLNX_OFED/DOCA) or set engine.fabric: auto"))
    if fab and not sockets_only(node.inv.engine.fabric):
        out += [("fabric", f"{p.label} ({p.link_layer}) is {p.state}: NCCL leaves it out; check its cable and "
                 f"switch port (ibstat {p.device})") for p in fab.ports if not p.active]
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


def cluster_problems(all_facts: Mapping[str, FabricFound], run) -> list[tuple[str, str, str]]:
    if sockets_only(run.inv.engine.fabric) or len(all_facts) < 2:
        return []
    fabs: dict[str, NodeFabric | None] = {n: node_fabric(f) for n, f in all_facts.items()}
    with_ib = sorted(n for n, f in fabs.items() if f and f.usable)
    out = []
    if with_ib and len(with_ib) < len(fabs):
        without = sorted(set(fabs) - set(with_ib))
        out.append(("cluster", "fabric", f"HCAs on {', '.join(with_ib)} only, none usable on "
                    f"{', '.join(without)}: NCCL falls back to sockets for the whole group; "
                    "fix the RDMA driver there or set engine.fabric: socket"))
    rates = {n: sorted({p.rate_gbps for p in f.ports if p.active}) for n, f in fabs.items()
             if f and f.usable}
    if len({tuple(r) for r in rates.values()}) > 1:
        shown = "; ".join(f"{n}: {'/'.join(f'{r:g}' for r in v)} Gb/s" for n, v in rates.items())
        out.append(("cluster", "fabric", f"HCA rates differ ({shown}): the slowest link paces "
                    "every all-reduce; check the cables and switch ports of the slower nodes"))
    return out


def warnings(all_facts: Mapping[str, fabric_topology.TopologyFound], run) -> list[str]:
    """GPUDirect RDMA off where HCAs are used: NCCL stages through host memory; then the
    GPU-to-HCA topology's findings (steps/fabric/fabric_topology.py)."""
    if sockets_only(run.inv.engine.fabric):
        return []
    off = sorted(n for n, f in all_facts.items()
                 if (fab := node_fabric(f)) and fab.usable and not fab.gpudirect_rdma)
    return ([f"warning: GPUDirect RDMA is off on {', '.join(off)} (nvidia_peermem not loaded): "
             "NCCL copies through host memory; `modprobe nvidia_peermem`"] if off else []) + \
        fabric_topology.warnings(all_facts)


# NCCL over TCP sockets moves a few GB/s per node where 4-8 NDR HCAs move 50-100 GB/s
# (NVIDIA/nccl#1676: all-reduce fell from ~180 to ~10 GB/s when the RDMA path was lost).
SOCKET_COST = ("a multi-node group on TCP sockets runs its all-reduce at a fraction of the "
               "HCAs' bandwidth (NVIDIA/nccl#1676: ~180 -> ~10 GB/s)")


def group_transport(transports: dict[str, str | None]):
    """One value when every rank that printed one agrees; the sorted list when they differ."""
    seen = {t for t in transports.values() if t}
    return seen.pop() if len(seen) == 1 else (sorted(seen) if seen else None)


def socket_warning(transports: dict[str, str | None], with_hcas: list[str]) -> str | None:
    """A multi-node group on sockets while nodes have HCAs; one node talks over no network."""
    if group_transport(transports) == "Socket" and len(transports) > 1 and with_hcas:
        return f"NCCL uses sockets while {', '.join(sorted(with_hcas))} have HCAs: {SOCKET_COST}"
    return None


def transport_facts(inv, is_head: bool) -> list[F.Fact]:
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

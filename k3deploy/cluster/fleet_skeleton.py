"""`k3deploy plan ... --emit-inventory FILE --groups N`: a fleet skeleton, N groups of the
planned shape behind one router (cluster/fleet.py's shape).

Built from the one-group skeleton (inventory_skeleton.py), so a group of the fleet is exactly
what `plan` would emit for one group; the nodes are numbered across the fleet, so names and
the RFC 5737 placeholder addresses stay unique.
"""

from __future__ import annotations

from typing import TypedDict

import yaml

from k3deploy.cluster.fleet_router import SMG_IMAGE
from k3deploy.cluster.inventory_skeleton import NodeDoc, Shared, _nodes, shared_sections, skeleton_yaml
from k3deploy.cluster.sizing import SizingResult


class RouterDoc(TypedDict):
    node: str
    port: int
    metrics_port: int
    policy: str
    image: str
    health_check_interval: int


class GroupDoc(TypedDict):
    name: str
    nodes: list[NodeDoc]


class FleetDoc(Shared):
    router: RouterDoc
    groups: list[GroupDoc]


def fleet_skeleton_for(config: SizingResult, groups: int,
                       cluster: str | None = None) -> FleetDoc:
    """A fleet inventory dict: the shared sections, the router on the first group's head,
    then the groups (g0, g1, ...), each with its own nodes, the first of each its head."""
    if groups < 2:
        raise ValueError(f"a fleet has at least two groups, not {groups}")
    shared = shared_sections(config, cluster or f"k3-{config.gpu}-{groups}x{config.nodes}x"
                             f"{config.gpus_per_node}")
    nodes = _nodes(config.nodes * groups)
    return {
        **shared,
        "router": {"node": nodes[0]["name"], "port": 30000, "metrics_port": 29000,
                   "policy": "cache_aware", "image": SMG_IMAGE, "health_check_interval": 5},
        "groups": [{"name": f"g{g}", "nodes": nodes[g * config.nodes:(g + 1) * config.nodes]}
                   for g in range(groups)],
    }


def fleet_skeleton_yaml(config: SizingResult, groups: int, cluster: str | None = None) -> str:
    """The one-group skeleton's header, then the fleet."""
    header = [line for line in skeleton_yaml(config, cluster).splitlines() if line.startswith("#")]
    header.insert(1, f"# a fleet: {groups} groups of this shape behind one router (SMG); every "
                     "shared section may be overridden per group (docs/inventory.md, Fleet)")
    body = yaml.safe_dump(fleet_skeleton_for(config, groups, cluster), sort_keys=False,
                          default_flow_style=False)
    return "\n".join(header) + "\n" + body

"""Cross-group rules of a fleet inventory (cluster/fleet.py): what no group's own rules can see.

Each group's own rules (inventory_rules.py: ranks 0..M-1, ports, the GPU arithmetic of its
parallel flags, ...) run on the group as a one-group inventory. These add what only the whole
fleet shows: nodes repeated across groups, groups of different shapes, the one serving key,
and the router's node and ports. Problems read "<field path>: <what is wrong>; <what to do>".
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from k3deploy.cluster.inventory_rules import PARALLEL_FLAGS, _repeats, named_ports, ssh_port
from k3deploy.engines.layout import inventory_executor, parallel_layout

if TYPE_CHECKING:
    from k3deploy.cluster.fleet_router import RouterSpec
    from k3deploy.cluster.inventory import Inventory, Node

    # (the group's name, None when it has none; its Inventory, or what parsed of a broken one)
    Group = tuple[str | None, Inventory]

NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,40}")   # inventory.Name: a cluster name
# SGLang's DP attention reserves ZMQ ports above its dist-init port: port_base = port + 1,
# port_base + 0..5 (sgl-project/sglang@001067ff python/sglang/srt/server_args.py,
# PortArgs.init_new); on one node, without --dist-init-addr, that port is --port + 233.
SGLANG_ZMQ_PORTS, SGLANG_ONE_NODE_DELTA = 6, 233


def fleet_problems(cluster: object, groups: list[Group], router: RouterSpec) -> list[str]:
    """groups: (name, Inventory or a partial one) in the fleet's order."""
    return (cluster_rules(cluster, [n for n, _ in groups]) + unique_across(groups)
            + shape_rules(groups) + key_rules(groups) + router_rules(groups, router))


def _where(i: int, groups: list[Group]) -> str:
    return f"groups[{i}] ({groups[i][0]})"


def cluster_rules(cluster: object, names: list[str | None]) -> list[str]:
    """names: None for a group without one (reported by its structure)."""
    if cluster is None:
        return ["cluster: missing; the fleet's name (each group runs as <cluster>-<group>)"]
    if not isinstance(cluster, str) or not NAME.fullmatch(cluster):
        return [f"cluster: {cluster!r} is not allowed here (must match {NAME.pattern}, the "
                "fleet's name)"]
    out = [f"groups[{i}].name: {names[i]!r} is already groups[{j}]'s; every group needs its "
           "own name" for i, j in _repeats(names)]
    # Each group runs as its own cluster CLUSTER-NAME (its state files, lock, certificates).
    out += [f"groups[{i}].name: {name!r} is not allowed: the group runs as cluster "
            f"{cluster}-{name}, which must match {NAME.pattern}; use a short name of "
            "[a-z0-9-]" for i, name in enumerate(names)
            if name is not None and not NAME.fullmatch(f"{cluster}-{name}")]
    return out


def _all_nodes(groups: list[Group]) -> list[tuple[int, int, Node]]:
    return [(g, j, node) for g, (_, inv) in enumerate(groups)
            for j, node in enumerate(inv.nodes or [])]


def unique_across(groups: list[Group]) -> list[str]:
    """Node names, SSH endpoints and private addresses unique over the whole fleet (repeats
    inside one group are that group's own rules' to report)."""
    nodes = _all_nodes(groups)
    keys: dict[str, tuple[list[object], str]] = {
        "name": ([n.name for _, _, n in nodes], "every node of a fleet needs its own name"),
        "address": ([(n.address.lower(), ssh_port(groups[g][1], n)) if n.address else None
                     for g, _, n in nodes], "one SSH endpoint is one machine; a machine "
                    "serves in one group"),
        "private_address": ([n.self_ip for _, _, n in nodes], "SGLANG_HOST_IP must be unique "
                            "per node across the fleet"),
    }
    out = []
    for field, (values, why) in keys.items():
        for i, j in _repeats(values):
            (gi, ni, node), (gj, nj, other) = nodes[i], nodes[j]
            if gi != gj:
                shown = node.self_ip if field == "private_address" else getattr(node, field)
                out.append(f"groups[{gi}].nodes[{ni}].{field}: {shown!r} is "
                           f"already groups[{gj}].nodes[{nj}]'s ({other.name}); {why}")
    return out


def shape(inv: Inventory) -> dict[str, object]:
    """What must be equal in every group: the router sends any request to any group."""
    n = len(inv.nodes)
    return {
        "gpu": f"{n} nodes x {inv.gpu.count} {inv.gpu.model}",
        "engine": f"{inv.engine.kind}"
                  + (f" ({inventory_executor(inv)})" if inventory_executor(inv) else ""),
        "parallel layout": parallel_layout(inv.engine.kind, n)
                           + "".join(f" {f}={inv.engine.args[f]}" for f in PARALLEL_FLAGS
                                     if f in inv.engine.args),
        "model": f"{inv.model.repo}@{inv.model.revision} {inv.model.precision}",
        "context_length": inv.engine.context_length,
    }


def shape_rules(groups: list[Group]) -> list[str]:
    if len(groups) < 2:
        return []
    try:
        first = shape(groups[0][1])
    except (AttributeError, TypeError):   # a partial group: its own problems say why
        return []
    out = []
    for i in range(1, len(groups)):
        try:
            mine = shape(groups[i][1])
        except (AttributeError, TypeError):
            continue
        diff = [f"{k} {mine[k]} (groups[0]: {first[k]})" for k in first if mine[k] != first[k]]
        if diff:
            out.append(f"{_where(i, groups)}: not the shape of groups[0] ({groups[0][0]}): "
                       + "; ".join(diff) + "; every group of a fleet has the same GPUs, node "
                       "count, engine, layout and model, the router sends any request anywhere")
    return out


def key_rules(groups: list[Group]) -> list[str]:
    """One serving key for the router and every group: SMG passes the client's Authorization
    through to the worker (docs/architecture.md, "Fleet router")."""
    keys = [(inv.engine.api_key_env, inv.engine.require_api_key) for _, inv in groups]
    return [f"{_where(i, groups)}: engine.api_key_env/require_api_key {keys[i][0]}/"
            f"{keys[i][1]} differ from groups[0]'s ({keys[0][0]}/{keys[0][1]}); the router "
            "passes each client's key to whichever group serves it, so every group takes one "
            "key" for i in range(1, len(keys)) if keys[i] != keys[0]]


def router_rules(groups: list[Group], router: RouterSpec) -> list[str]:
    out = _image_rules(router)
    if router.port is not None and router.port == router.metrics_port:
        out.append(f"router.metrics_port: {router.port} is router.port too; SMG binds both")
    if not groups:
        return out
    node = router.node
    if isinstance(node, str):
        names = {n.name for _, _, n in _all_nodes(groups)}
        if node not in names:
            return out + [f"router.node: {node!r} is no node of any group ("
                          + "; ".join(f"{g}: {', '.join(n.name for n in inv.nodes)}"
                                      for g, inv in groups)
                          + "); name one, or describe an extra node {name, address, ...}"]
    elif node is not None:
        out += _extra_node_rules(groups, node)
    return out + _port_clashes(groups, router)


def _image_rules(router: RouterSpec) -> list[str]:
    image = router.image or ""
    tag = image.rsplit("/", 1)[-1]
    if "@" in image or (":" in tag and not tag.endswith(":latest")):
        return []
    return [f"router.image: {image!r} is not pinned; name a version "
            "(lightseekorg/smg:1.13.0) or a digest, so every up runs the router it was "
            "tested with"]


def _extra_node_rules(groups: list[Group], node: Node) -> list[str]:
    out = []
    if node.rank is not None:
        out.append("router.node.rank: the router's own node is no rank of any group; remove it")
    for g, j, other in _all_nodes(groups):
        if other.name == node.name:
            out.append(f"router.node.name: {node.name!r} is groups[{g}].nodes[{j}]'s; to run "
                       f"the router there, write router.node: {node.name}")
        elif (node.address or "").lower() == (other.address or "").lower() and \
                ssh_port(groups[g][1], node) == ssh_port(groups[g][1], other):
            out.append(f"router.node.address: {node.address!r} is groups[{g}].nodes[{j}] "
                       f"({other.name}); to run the router there, write router.node: "
                       f"{other.name}")
    return out


def _host_nodes(groups: list[Group], router: RouterSpec) -> list[tuple[int, Node]]:
    """The group nodes on the router's machine: the one it names, or the first head."""
    node = router.node
    if node is None:
        return [(0, groups[0][1].head)] if groups[0][1].nodes else []
    name = node if isinstance(node, str) else node.name
    return [(g, n) for g, _, n in _all_nodes(groups) if n.name == name]


def _engine_ports(inv: Inventory) -> dict[str, range]:
    ports = {f"ports.{k}": range(p, p + 1) for k, p in named_ports(inv).items() if p}
    if inv.ports.serve is None or inv.ports.dist_init is None:   # reported by the group
        return ports
    dp_attention = parallel_layout(inv.engine.kind, len(inv.nodes)) == "dp-attention" \
        or inv.engine.args.get("enable-dp-attention")
    if inv.engine.kind == "sglang" and dp_attention:
        base = inv.ports.dist_init if len(inv.nodes) > 1 \
            else inv.ports.serve + SGLANG_ONE_NODE_DELTA
        ports["SGLang's DP-attention ports"] = range(base, base + SGLANG_ZMQ_PORTS + 1)
    return ports


def _port_clashes(groups: list[Group], router: RouterSpec) -> list[str]:
    mine = {"router.port": router.port, "router.metrics_port": router.metrics_port}
    out = []
    for g, node in _host_nodes(groups, router):
        for field, port in mine.items():
            out += [f"{field}: {port} is {what} of groups[{g}] ({groups[g][0]}) on "
                    f"{node.name}, the router's node; choose another port"
                    for what, span in _engine_ports(groups[g][1]).items() if port in span]
    return out

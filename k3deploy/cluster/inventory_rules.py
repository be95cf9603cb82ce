"""Cross-field inventory rules: the mistakes the guide warns cost an hour each.

Each rule returns problem strings of the form "<field path>: <what is wrong>; <what to do>".
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Protocol, TypeVar

from k3deploy.cluster.inventory_engine_args import engine_arg_rules
from k3deploy.cluster.fanout import DownloadView, peers_enabled
from k3deploy.engines.inventory_view import EngineChoice, PathsView
from k3deploy.engines.layout import VLLM_MAX_NODES, inventory_runs_over_ray, parallel_layout

# Env keys that carry secrets must never be inventory env overrides: those become
# `docker run --env K=V`, i.e. argv on the node, visible in ps and docker inspect.
SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD")
PARALLEL_FLAGS = ("tp-size", "tp", "ep-size", "ep")
H = TypeVar("H", bound=Hashable)


# What the rules read of cluster/inventory.py's Inventory, as Protocols: inventory.py imports
# this module, so it cannot import the model back. The rules also run on a partial inventory
# (inventory_partial.py), where a field that failed validation is None whatever its type.
class NodeView(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def address(self) -> str: ...
    @property
    def private_address(self) -> str | None: ...
    @property
    def port(self) -> int | None: ...
    @property
    def rank(self) -> int | None: ...
    @property
    def self_ip(self) -> str: ...
    @property
    def model_fields_set(self) -> set[str]: ...


class _EngineView(EngineChoice, Protocol):
    @property
    def env(self) -> Mapping[str, str | int | float]: ...


class _PathsView(PathsView, Protocol):
    @property
    def nvme(self) -> str: ...
    @property
    def hf_home(self) -> str | None: ...


class _Ports(Protocol):
    dist_init: int   # attributes, as the model's fields are
    serve: int
    ray: int
    peer: int
    guard: int
    mesh: int


class _Count(Protocol):
    @property
    def count(self) -> int: ...


class _Port(Protocol):
    @property
    def port(self) -> int | None: ...


class _Enabled(Protocol):
    @property
    def enabled(self) -> bool: ...


class RulesView(Protocol):
    @property
    def nodes(self) -> Sequence[NodeView]: ...
    @property
    def engine(self) -> _EngineView: ...
    @property
    def paths(self) -> _PathsView: ...
    @property
    def gpu(self) -> _Count: ...
    @property
    def ports(self) -> _Ports: ...
    @property
    def ssh(self) -> _Port: ...
    @property
    def guard(self) -> _Enabled: ...
    @property
    def download(self) -> DownloadView: ...
    @property
    def total_gpus(self) -> int: ...
    def ranked(self) -> Sequence[tuple[int, NodeView]]: ...


def _repeats(values: Sequence[H | None]) -> list[tuple[int, int]]:
    """(index, index of the first holder) for every value seen before; None is no value (a
    field that failed validation, reported already)."""
    first: dict[H, int] = {}
    out = []
    for i, value in enumerate(values):
        if value is None:
            continue
        if value in first:
            out.append((i, first[value]))
        first.setdefault(value, i)
    return out


def _duplicates(values: list[str]) -> list[str]:
    return [v for v, c in Counter(values).items() if c > 1]


def ssh_port(inv: RulesView, node: NodeView) -> int:
    """The port a node's SSH endpoint is compared by: the node's, else the inventory's, else
    ssh(1)'s default."""
    return node.port or inv.ssh.port or 22


def unique_fields(inv: RulesView) -> list[str]:
    names = [n.name for n in inv.nodes]
    out = [f"nodes[{i}].name: {names[i]!r} is already used by nodes[{j}]; every node needs its "
           "own name" for i, j in _repeats(names)]
    # A node is its SSH endpoint: providers hand out one gateway host with a port per machine
    # (`ssh -p 40123 root@gw`), so one address with distinct ports is distinct nodes.
    ends = [(n.address.lower(), ssh_port(inv, n)) if n.address else None for n in inv.nodes]
    out += [f"nodes[{i}].address: {inv.nodes[i].address!r} is already used by nodes[{j}] "
            f"({names[j]}) with SSH port {end[1]}; every node needs its own SSH endpoint "
            "(its own address, or its own nodes[].port behind one gateway)"
            for i, j in _repeats(ends) if (end := ends[i]) is not None]
    for i, j in _repeats([n.self_ip for n in inv.nodes]):
        given = bool(inv.nodes[i].private_address)
        out.append(f"nodes[{i}].{'private_address' if given else 'address'}: "
                   f"{inv.nodes[i].self_ip!r} is already the private address of nodes[{j}] "
                   f"({names[j]}); SGLANG_HOST_IP must be unique per node"
                   + ("" if given else "; nodes behind one SSH gateway need each its own "
                      "nodes[].private_address"))
    return out


def rank_rules(inv: RulesView) -> list[str]:
    given = [n.rank for n in inv.nodes]
    # None: not set, or set and failed validation (reported already, so not "missing" too).
    absent = [i for i, n in enumerate(inv.nodes) if n.rank is None
              and "rank" not in n.model_fields_set]
    if len(absent) == len(given):
        return []
    if absent:
        return [f"nodes[{i}].rank: missing while other nodes set one; set rank on every node or "
                "on none (default: list order, the first node is rank 0, the head)"
                for i in absent]
    out = [f"nodes[{i}].rank: rank {given[i]} is already claimed by nodes[{j}] "
           f"({inv.nodes[j].name}); two nodes with one rank never form a process group (they "
           "wait until --dist-timeout)" for i, j in _repeats(given)]
    if not out:  # distinct ranks that are not 0..N-1: some are out of range
        out = [f"nodes[{i}].rank: {r} is outside 0..{len(given) - 1}; ranks must be exactly "
               f"0..{len(given) - 1}" for i, r in enumerate(given)
               if r is not None and r >= len(given)]
    return out


def address_rules(inv: RulesView) -> list[str]:
    out = []
    for i, node in enumerate(inv.nodes):
        if node.self_ip is None:  # the address failed validation: reported already
            continue
        where = f"nodes[{i}].{'private_address' if node.private_address else 'address'}"
        try:
            ip = ipaddress.ip_address(node.self_ip)
        except ValueError:
            out.append(f"{where}: {node.self_ip!r} is not an IP address; set the node's private "
                       "IPv4 address (nodes[].private_address, SELF_IP)")
            continue
        if ip.version != 4:
            out.append(f"{where}: {node.self_ip} is IPv6; an IPv6 --dist-init-addr silently "
                       "fails to connect upstream, use IPv4")
    return out


def parallel_rules(inv: RulesView) -> list[str]:
    out = []
    total = inv.total_gpus
    for flag in PARALLEL_FLAGS:
        value = inv.engine.args.get(flag)
        if value is None or isinstance(value, bool):
            continue
        try:
            ok = int(value) == total
        except (TypeError, ValueError):
            ok = False
        if not ok and parallel_layout(inv.engine.kind, len(inv.nodes)) == "tp-ep":
            out.append(f"engine.args.{flag}: {value} but the cluster has {total} GPUs "
                       f"({len(inv.nodes)} nodes x {inv.gpu.count}); it must equal {total}")
    return out


def secret_rules(inv: RulesView) -> list[str]:
    out = []
    for key in inv.engine.env:
        if any(word in key.upper() for word in SECRET_WORDS):
            out.append(f"engine.env.{key}: secrets must not be engine env overrides (they "
                       "would be visible in argv); use hf_token_env / engine.api_key_env")
    for flag in inv.engine.args:
        if flag in ("api-key", "hf-token", "token"):
            out.append(f"engine.args.{flag}: secrets must not be engine arguments (visible in "
                       "ps on the node); the endpoint key is generated and passed in a 0600 file")
    return out


def named_ports(inv: RulesView) -> dict[str, int]:
    """The ports the inventory fixes on every node of the group, by their ports.* name (the
    ones this group uses: ray over Ray, peer with the fan-out, ...)."""
    ports = {"dist_init": inv.ports.dist_init, "serve": inv.ports.serve}
    if inventory_runs_over_ray(inv):
        ports["ray"] = inv.ports.ray
    if peers_enabled(inv):
        ports["peer"] = inv.ports.peer
    if inv.guard.enabled:
        ports["guard"] = inv.ports.guard
    if len(inv.nodes) > 1:   # the fabric mesh (check --fabric, up's preflight) pairs nodes
        ports["mesh"] = inv.ports.mesh
    return ports


def port_rules(inv: RulesView) -> list[str]:
    ports = named_ports(inv)
    dups = _duplicates([str(p) for p in ports.values()])
    return [f"ports: {d} is used for more than one purpose ("
            + ", ".join(f"ports.{k}" for k, p in ports.items() if str(p) == d) + ")"
            for d in dups]


def engine_rules(inv: RulesView) -> list[str]:
    out = []
    if inv.engine.kind == "vllm" and len(inv.nodes) > VLLM_MAX_NODES:
        out.append("engine.kind: the vLLM reference configs are 1 node or 2 nodes; "
                   f"{len(inv.nodes)} nodes is not a layout k3deploy knows")
    return out + executor_rules(inv)


def executor_rules(inv: RulesView) -> list[str]:
    """engine.executor is vLLM's choice across nodes (engines/layout.py)."""
    executor = inv.engine.executor
    if executor is None:
        return []
    if inv.engine.kind != "vllm":
        return [f"engine.executor: {executor} is a vLLM setting (mp or ray across nodes); "
                "SGLang forms its own group (--nnodes/--dist-init-addr): remove it"]
    if executor == "ray" and len(inv.nodes) == 1:
        return ["engine.executor: ray needs more than one node; one node runs every rank in "
                "one `vllm serve` (remove it, or set mp)"]
    if executor == "mp" and len(inv.nodes) > 1:
        return [f"engine.args.{flag}: {inv.engine.args[flag]} asks for Ray, but "
                "engine.executor is mp (set engine.executor: ray, or remove the flag)"
                for flag in ("data-parallel-backend", "distributed-executor-backend")
                if str(inv.engine.args.get(flag)) == "ray"]
    return []


def shared_cache_rules(inv: RulesView) -> list[str]:
    """download.shared: the cache must be named, off the node-local NVMe, and not fanned out."""
    download, paths = inv.download, inv.paths
    if not download.shared:
        return []
    out = []
    hf, nvme = paths.hf_home, (paths.nvme or "").rstrip("/")
    if not hf:
        out.append("paths.hf_home: download.shared needs the shared volume's path here (the "
                   "same path on every node)")
    elif nvme and (hf.rstrip("/") + "/").startswith(nvme + "/"):
        out.append(f"paths.hf_home: {hf} is under paths.nvme ({nvme}), each node's own disk; "
                   "with download.shared it must be the shared volume's mount point")
    if download.peers:
        out.append("download.peers: true with download.shared: the nodes already share the "
                   "bytes; drop download.peers")
    return out


RULES: tuple[Callable[[RulesView], list[str]], ...] = (
    unique_fields, rank_rules, address_rules, parallel_rules, secret_rules, port_rules,
    engine_rules, engine_arg_rules, shared_cache_rules)


def semantic_problems(inv: RulesView) -> list[str]:
    problems: list[str] = []
    for rule in RULES:
        problems.extend(rule(inv))
    return problems

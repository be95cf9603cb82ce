"""Cross-field inventory rules: the mistakes the guide warns cost an hour each.

Each rule returns problem strings of the form "<field path>: <what is wrong>; <what to do>".
"""

from __future__ import annotations

import ipaddress
from collections import Counter

# Env keys that carry secrets must never be inventory env overrides: those become
# `docker run --env K=V`, i.e. argv on the node, visible in ps and docker inspect.
SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD")
PARALLEL_FLAGS = ("tp-size", "tp", "ep-size", "ep")


def _duplicates(values: list[str]) -> list[str]:
    return [v for v, c in Counter(values).items() if c > 1]


def unique_fields(inv) -> list[str]:
    out = []
    for field in ("name", "address"):
        for dup in _duplicates([getattr(n, field) for n in inv.nodes]):
            holders = [n.name for n in inv.nodes if getattr(n, field) == dup]
            out.append(f"nodes[].{field}: {dup!r} is used by {', '.join(holders)}; "
                       f"every node needs its own {field}")
    for dup in _duplicates([n.self_ip for n in inv.nodes]):
        out.append(f"nodes[].private_address: {dup!r} is shared by several nodes; "
                   "SGLANG_HOST_IP must be unique per node")
    return out


def rank_rules(inv) -> list[str]:
    given = [n.rank for n in inv.nodes if n.rank is not None]
    if not given:
        return []
    if len(given) != len(inv.nodes):
        return ["nodes[].rank: set rank on every node or on none (default: list order, "
                "the first node is rank 0, the head)"]
    out = []
    for dup in _duplicates([str(r) for r in given]):
        holders = [n.name for n in inv.nodes if str(n.rank) == dup]
        out.append(f"nodes[].rank: rank {dup} is claimed by {', '.join(holders)}; two nodes "
                   "with one rank never form a process group (they wait until --dist-timeout)")
    if sorted(set(given)) != list(range(len(inv.nodes))) and not out:
        out.append(f"nodes[].rank: ranks must be exactly 0..{len(inv.nodes) - 1}, got "
                   f"{sorted(given)}")
    return out


def address_rules(inv) -> list[str]:
    out = []
    for i, node in enumerate(inv.nodes):
        try:
            ip = ipaddress.ip_address(node.self_ip)
        except ValueError:
            out.append(f"nodes[{i}].private_address: {node.self_ip!r} is not an IP address; "
                       "set the node's private IPv4 address (SELF_IP)")
            continue
        if ip.version != 4:
            out.append(f"nodes[{i}].private_address: {node.self_ip} is IPv6; an IPv6 "
                       "--dist-init-addr silently fails to connect upstream, use IPv4")
    return out


def parallel_rules(inv) -> list[str]:
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
        if not ok and inv.engine.kind == "sglang" and len(inv.nodes) > 1:
            out.append(f"engine.args.{flag}: {value} but the cluster has {total} GPUs "
                       f"({len(inv.nodes)} nodes x {inv.gpu.count}); it must equal {total}")
    return out


def secret_rules(inv) -> list[str]:
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


def port_rules(inv) -> list[str]:
    ports = {"dist_init": inv.ports.dist_init, "serve": inv.ports.serve}
    if inv.engine.kind == "vllm" and len(inv.nodes) > 1:
        ports["ray"] = inv.ports.ray
    if inv.guard.enabled:
        ports["guard"] = inv.ports.guard
    dups = _duplicates([str(p) for p in ports.values()])
    return [f"ports: {d} is used for more than one purpose" for d in dups]


def engine_rules(inv) -> list[str]:
    out = []
    if inv.engine.kind == "vllm" and len(inv.nodes) > 2:
        out.append("engine.kind: the vLLM reference configs are 1 node or 2 nodes over Ray; "
                   f"{len(inv.nodes)} nodes is not a layout k3deploy knows")
    return out


RULES = (unique_fields, rank_rules, address_rules, parallel_rules, secret_rules, port_rules,
         engine_rules)


def semantic_problems(inv) -> list[str]:
    problems: list[str] = []
    for rule in RULES:
        problems.extend(rule(inv))
    return problems

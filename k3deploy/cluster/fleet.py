"""A fleet inventory: N groups, each a whole group as a one-group inventory describes it, behind
one SGLang router (SMG). Validated completely before any SSH; split into one Inventory per
group, which the one-group machinery runs unchanged.

Shape (docs/inventory.md, "Fleet"): the one-group keys at the top are shared by every group;
`groups:` lists the groups, each with its own `name` and `nodes` and, optionally, any shared
section it overrides (merged key by key: `engine: {image: X}` changes only the image);
`router:` says where SMG runs. A document without `groups:` is a one-group inventory.
"""

from __future__ import annotations

import os
import re
from typing import TypeGuard

from pydantic import Field, ValidationError

from k3deploy.cluster.fleet_router import RouterSpec
from k3deploy.cluster.fleet_rules import fleet_problems
from k3deploy.cluster.inventory import (Inventory, Name, Node, _format_pydantic, _Model,
                                        load_document)
from k3deploy.cluster.inventory_partial import partial
from k3deploy.cluster.inventory_rules import semantic_problems
from k3deploy.core.errors import InventoryError
from k3deploy.core.jsonvalue import JSON

class FleetGroup(_Model):
    name: Name
    inventory: Inventory


class Fleet(_Model):
    cluster: Name
    router: RouterSpec
    groups: list[FleetGroup] = Field(min_length=1)
    source: str = "<memory>"

    def router_node(self) -> Node:
        """The node SMG runs on: the named group node, the extra node, or the first head."""
        wanted = self.router.node
        if isinstance(wanted, Node):
            return wanted
        if wanted is None:
            return self.groups[0].inventory.head
        return next(n for g in self.groups for n in g.inventory.nodes if n.name == wanted)


def is_fleet(data: object) -> TypeGuard[dict[str, JSON]]:
    """A fleet document: load_document's YAML, a mapping with `groups:` (what is in it,
    parse checks)."""
    return isinstance(data, dict) and "groups" in data


def group_cluster(cluster: str, group: str) -> str:
    """A group's own cluster name: its state files, lock and certificates stay apart."""
    return f"{cluster}-{group}"


def _merge(shared: dict[str, JSON], override: dict[str, JSON]) -> dict[str, JSON]:
    out = dict(shared)
    for key, value in override.items():
        current = out.get(key)
        out[key] = _merge(current, value) if isinstance(current, dict) and isinstance(value, dict) else value
    return out


def group_documents(data: dict[str, JSON]) -> list[tuple[str | None, dict[str, JSON], set[str]]]:
    """(group name, its one-group inventory document, the keys the group gives itself) for
    each entry of `groups:` (parse has made sure each is a mapping)."""
    shared = {k: v for k, v in data.items() if k not in ("router", "groups")}
    out = []
    groups = data.get("groups")
    for entry in groups if isinstance(groups, list) else []:
        if not isinstance(entry, dict):
            continue
        own = {k: v for k, v in entry.items() if k != "name"}
        doc = _merge(shared, own)
        name = entry.get("name")
        doc["cluster"] = group_cluster(str(data.get("cluster")), str(name))
        out.append((None if name is None else str(name), doc, set(own)))
    return out


def split(fleet: Fleet) -> list[Inventory]:
    """One Inventory per group, in the fleet's order, for the one-group machinery."""
    return [g.inventory for g in fleet.groups]


def _structure_problems(data: dict[str, JSON]) -> list[str]:
    out = []
    if "nodes" in data:
        out.append("nodes: a fleet's nodes are listed under each group (groups[].nodes); "
                   "move them there")
    groups = data.get("groups")
    if not isinstance(groups, list) or not groups:
        return out + ["groups: must be a list of groups, each {name, nodes: [...]}"]
    for i, entry in enumerate(groups):
        if not isinstance(entry, dict):
            out.append(f"groups[{i}]: must be a mapping {{name, nodes: [...]}}")
            continue
        if "name" not in entry:   # other keys a group must not set: its pydantic errors
            out.append(f"groups[{i}].name: missing; every group needs its own name")
        if "cluster" in entry:
            out.append(f"groups[{i}].cluster: a group runs as cluster <fleet cluster>-<group "
                       "name>; remove it")
    return out


NODE_REF = re.compile(r"(?<![\w.\]])nodes\[")
TOP_KEY = re.compile(r"[a-z_]*")   # a problem's field path starts with its top-level key


def _top_key(problem: str) -> str:
    found = TOP_KEY.match(problem)
    return found.group(0) if found else ""


def _in_group(i: int, text: str) -> str:
    """A group's problem with its node paths made whole: nodes[1] -> groups[0].nodes[1]."""
    return NODE_REF.sub(f"groups[{i}].nodes[", text)


def _group_problems(i: int, doc: dict[str, JSON], own: set[str],
                    source: str) -> tuple[Inventory, list[str], list[str]]:
    """(the group's Inventory or a partial one, problems in its own keys, problems in shared
    keys): a shared key's problem is the fleet's, said once when every group has it."""
    try:
        inv, schema = Inventory.model_validate({**doc, "source": source}), []
    except ValidationError as err:
        inv = partial(Inventory, {**doc, "source": source})
        # The group's cluster name is the fleet's and its own name: fleet_rules says why
        # one of them is wrong.
        schema = [(loc, p) for loc, p in zip((e["loc"][0] if e["loc"] else "" for e in
                                              err.errors()), _format_pydantic(err))
                  if loc != "cluster"]
    rules = [(_top_key(p), p) for p in semantic_problems(inv)]
    mine = [_in_group(i, p) if key == "nodes" else f"groups[{i}].{p}"
            for key, p in schema + rules if key in own]
    return inv, mine, [p for key, p in schema + rules if key not in own]


def parse(data: dict[str, JSON], source: str = "<memory>") -> Fleet:
    """Validate a fleet document; InventoryError with every problem at once."""
    problems = _structure_problems(data)
    try:
        router = RouterSpec.model_validate(data.get("router") or {})
    except ValidationError as err:
        router = partial(RouterSpec, data.get("router") or {})
        problems += [f"router.{p}" for p in _format_pydantic(err)]
    listed = data.get("groups")
    entries = listed if isinstance(listed, list) else []
    if not entries or any(not isinstance(g, dict) for g in entries):
        # no group paths to name while the list itself is malformed
        raise InventoryError(source, problems)
    docs = group_documents(data)
    groups, shared = [], []
    for i, (name, doc, own) in enumerate(docs):
        inv, mine, theirs = _group_problems(i, doc, own, source)
        groups.append((name, inv))
        problems += mine
        shared.append(theirs)
    problems += _shared_once(shared, [name for name, _, _ in docs])
    cluster = data.get("cluster")
    problems += fleet_problems(cluster, groups, router)
    if problems or not isinstance(cluster, str):   # a cluster not a name is one of the problems
        raise InventoryError(source, list(dict.fromkeys(problems)))
    return Fleet(cluster=cluster, router=router, source=source,
                 groups=[FleetGroup(name=str(n), inventory=inv) for n, inv in groups])


def _shared_once(per_group: list[list[str]], names: list[str | None]) -> list[str]:
    """A problem in a shared section that every group has is said once, as it is; one only
    some groups have (it depends on their nodes) names them."""
    out = []
    for i, problems in enumerate(per_group):
        for p in problems:
            if all(p in other for other in per_group):
                out.append(p)
            else:
                out.append(f"groups[{i}] ({names[i]}): {_in_group(i, p)}")
    return out


def load(path: str | os.PathLike[str]) -> Fleet:
    path = str(path)
    data = load_document(path)
    if not is_fleet(data):
        raise InventoryError(path, ["groups: this is a one-group inventory (no groups:)"])
    return parse(data, source=path)

"""A reference inventory's launch against the upstream recipe cell it follows
(tests/fixtures/recipes/<cell>.json), flag by flag and variable by variable, without I/O
beyond reading the checked-in files.

Flags are compared by the engine's own option (cli_contract tables: `--tp` and `--tp-size`
are one option); the cell's placeholders take the node's facts (rank, head, own address, NIC)
and the page's defaults (host, port), so only what k3deploy chose differently remains.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from recipe_cells import HEADLESS, flags_of

from k3deploy import engines
from k3deploy.cli import launch_contract
from k3deploy.cluster import inventory
from k3deploy.engines import cli_contract

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "tests" / "fixtures" / "recipes"
INVENTORIES = ROOT / "inventories"
REVISION = "{{REVISION}}"   # the commit k3deploy pins; the cells leave the revision out
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}|\$(\w+)")


@dataclass(frozen=True, order=True)
class Difference:
    inventory: str
    kind: str                 # "flag" or "env"
    name: str
    ours: object              # None: absent from k3deploy's launch
    theirs: object            # None: absent from the cell


def cells() -> dict[str, dict]:
    """inventory file -> its cell's snapshot."""
    out = {}
    for path in sorted(RECIPES.glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        out[doc["inventory"]] = doc
    return out


def listed() -> list[dict]:
    return yaml.safe_load((RECIPES / "differences.yaml").read_text(encoding="utf-8"))


def canonical(engine: str, name: str, value: object) -> tuple[str, object]:
    """The option's first spelling in the engine's table, and its value: a negative
    spelling (vLLM's `--no-enable-prefix-caching`) is the option set to False."""
    if not name:
        return name, value
    opt, _, _ = cli_contract.resolve(cli_contract.load_table(engine), f"--{name}")
    if opt is None:
        return name, value
    if f"--{name}" in opt.get("negative_option_strings", []):
        return opt["option_strings"][0][2:], False
    return opt["option_strings"][0][2:], value


def _canonical_flags(engine: str, flags: dict) -> dict:
    return dict(canonical(engine, k, v) for k, v in flags.items())


def _facts(spec, defaults: dict) -> dict[str, str]:
    node = {"MODEL_NAME": spec.model_repo, "NODE_RANK": str(spec.node_rank),
            "NODE0_IP": spec.head_address, "HEAD_IP": spec.head_address,
            "LOCAL_IP": spec.self_address, "NETWORK_IFACE": spec.nic,
            "IFACE_NAME": spec.nic}
    return {**defaults, **node}


def _fill(value: object, facts: dict[str, str]) -> object:
    if not isinstance(value, str):
        return value
    return _PLACEHOLDER.sub(lambda m: facts.get(m.group(1) or m.group(2), m.group(0)), value)


def _env_of(spec) -> dict[str, str]:
    env = {}
    for argv in engines.node_launch_argvs(spec):
        if argv[:2] == ["docker", "run"]:
            env.update(value.split("=", 1) for flag, value in zip(argv, argv[1:])
                       if flag in ("-e", "--env"))
    return env


def ours(spec, engine: str) -> tuple[dict, dict] | None:
    """(flags, env) of this node's `engine` command, or None if the node runs none."""
    args = [a for e, a in launch_contract.engine_commands(spec) if e == engine]
    if not args:
        return None
    flags = {k: (REVISION if v == spec.revision_sha else v)
             for k, v in _canonical_flags(engine, flags_of(args[0])).items()}
    return flags, _env_of(spec)


def theirs(cell: dict, spec) -> tuple[dict, dict]:
    facts = _facts(spec, cell.get("defaults", {}))
    flags = {k: _fill(v, facts) for k, v in _canonical_flags(cell["engine"], cell["flags"]).items()
             if v != HEADLESS or spec.node_rank > 0}
    flags.update({k: True for k, v in flags.items() if v == HEADLESS})
    return flags, {k: _fill(v, facts) for k, v in cell["env"].items()}


def every_node(cell: dict) -> bool:
    """A cell whose command takes the node's rank as a placeholder is every node's command
    (the SGLang cookbook); otherwise it is the API node's (vLLM's rank-0 command)."""
    return any("{{NODE_RANK}}" in str(v) for v in cell["flags"].values())


def _compare(name: str, kind: str, mine: dict, cell: dict) -> set[Difference]:
    return {Difference(name, kind, key, mine.get(key), cell.get(key))
            for key in mine.keys() | cell.keys() if mine.get(key) != cell.get(key)}


def differences(name: str, cell: dict) -> set[Difference]:
    """Every flag and variable where the inventory's launch departs from its cell, on every
    node that runs the cell's engine command (on the API node only, for a rank-0 cell)."""
    found: set[Difference] = set()
    specs = launch_contract.inventory_specs(inventory.load(INVENTORIES / name))
    for spec in specs if every_node(cell) else specs[:1]:
        mine = ours(spec, cell["engine"])
        if mine is None:
            continue
        cell_flags, cell_env = theirs(cell, spec)
        found |= _compare(name, "flag", mine[0], cell_flags)
        found |= _compare(name, "env", mine[1], cell_env)
    return found


def as_listed(entry: dict) -> Difference:
    return Difference(entry["inventory"], entry["kind"], entry["name"], entry.get("ours"),
                      entry.get("theirs"))

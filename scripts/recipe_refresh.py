"""`scripts/engine-contract --recipes DIR`: rebuild the recipe snapshot
(tests/fixtures/recipes/<cell>.json) from fetched copies of the recipe pages in DIR, and say
what changed flag by flag and variable by variable. tests/fixtures/recipes/cells.yaml names
the cells and the page file each is read from; the tests read only the snapshot.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

import recipe_cells

ROOT = Path(__file__).resolve().parent.parent
RECIPES = ROOT / "tests" / "fixtures" / "recipes"
SNAPSHOT_KEYS = ("name", "inventory", "engine", "platform", "source", "selection", "defaults")


def cell_entries(recipes: Path = RECIPES) -> list[dict]:
    return yaml.safe_load((recipes / "cells.yaml").read_text(encoding="utf-8"))


def read_cell(entry: dict, pages: Path) -> dict:
    """The cell as the page renders it: {'flags', 'env'} (+ 'nnodes' where the page says)."""
    how = entry["read"]
    text = (pages / how["page"]).read_text(encoding="utf-8")
    if how["kind"] == "markdown":
        return recipe_cells.markdown_cells(text)[how["index"]]
    if how["kind"] == "cookbook-cell":
        return recipe_cells.jsx_cell(text, how["match"])
    if how["kind"] == "recipes-yaml":
        strategy = yaml.safe_load((pages / how["strategy"]).read_text(encoding="utf-8"))
        return recipe_cells.recipes_yaml_cell(
            yaml.safe_load(text), strategy, how["generation"], nnodes=how["nnodes"],
            gpus_per_node=how["gpus_per_node"])
    raise ValueError(f"{entry['name']}: unknown page kind {how['kind']!r}")


def snapshot(entry: dict, cell: dict) -> dict:
    doc = {key: entry[key] for key in SNAPSHOT_KEYS if key in entry}
    doc["engine"] = cell["engine"]
    if "nnodes" in cell:
        doc["nnodes"] = cell["nnodes"]
    doc["flags"], doc["env"] = cell["flags"], cell["env"]
    return doc


def _changed(kind: str, old: dict, new: dict) -> list[str]:
    lines = []
    for name in sorted(old.keys() | new.keys()):
        label = f"{kind} {name or '<positional>'}"
        if name not in old:
            lines.append(f"  + {label} = {new[name]!r}")
        elif name not in new:
            lines.append(f"  - {label} (was {old[name]!r})")
        elif old[name] != new[name]:
            lines.append(f"  ~ {label}: {old[name]!r} -> {new[name]!r}")
    return lines


def changes(old: dict | None, new: dict) -> list[str]:
    """What a refresh changes in one cell, one line per flag or variable."""
    if old is None:
        return [f"{new['name']}: new cell ({len(new['flags'])} flags, {len(new['env'])} env)"]
    lines = _changed("flag", old.get("flags", {}), new["flags"])
    lines += _changed("env", old.get("env", {}), new["env"])
    if old.get("nnodes") != new.get("nnodes"):
        lines.append(f"  ~ nnodes: {old.get('nnodes')} -> {new.get('nnodes')}")
    return [f"{new['name']}: {len(lines)} change(s)", *lines] if lines else []


def refresh(pages: Path, recipes: Path = RECIPES) -> list[str]:
    """Rewrite every <cell>.json from the pages in `pages`; return what changed."""
    report = []
    for entry in cell_entries(recipes):
        path = recipes / f"{entry['name']}.json"
        old = json.loads(path.read_text(encoding="utf-8")) if path.exists() else None
        new = snapshot(entry, read_cell(entry, pages))
        report += changes(old, new)
        path.write_text(json.dumps(new, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return report

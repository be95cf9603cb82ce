"""Every reference inventory's launch equals the upstream recipe cell it follows
(tests/fixtures/recipes/<cell>.json, refreshed by `scripts/engine-contract --recipes DIR`),
flag by flag and variable by variable, except the differences listed with their reasons in
tests/fixtures/recipes/differences.yaml: a flag or variable added on either side without a
listed reason fails, and so does a listed difference that no longer exists."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import recipe_diff
from recipe_diff import Difference, as_listed

ROOT = Path(__file__).resolve().parents[2]
CELLS = recipe_diff.cells()
LISTED = recipe_diff.listed()
OPERATIONS = ROOT / "docs" / "operations.md"
README = ROOT / "README.md"


def _show(diffs) -> str:
    return "\n".join(f"  {d.kind} {d.name}: ours={d.ours!r} theirs={d.theirs!r}"
                     for d in sorted(diffs))


def test_every_reference_inventory_follows_one_cell():
    assert sorted(CELLS) == sorted(p.name for p in recipe_diff.INVENTORIES.glob("*.yaml"))


def test_every_cell_names_its_source():
    for cell in CELLS.values():
        source = cell["source"]
        assert source["repo"].count("/") == 1 and source["path"] and source["date"]
        assert len(source["commit"]) == 40 and int(source["commit"], 16) >= 0
        assert cell["engine"] in ("sglang", "vllm") and cell["flags"]


@pytest.mark.parametrize("name", sorted(CELLS))
def test_the_launch_equals_its_cell_but_for_the_listed_differences(name):
    found = recipe_diff.differences(name, CELLS[name])
    listed = {as_listed(e) for e in LISTED if e["inventory"] == name}
    unlisted, gone = found - listed, listed - found
    assert not unlisted, (f"{name} departs from {CELLS[name]['name']} without a reason in "
                          f"tests/fixtures/recipes/differences.yaml:\n{_show(unlisted)}")
    assert not gone, (f"listed for {name} but no longer a difference (drop it from "
                      f"differences.yaml):\n{_show(gone)}")


def test_every_listed_difference_says_why_once():
    keys = [as_listed(e) for e in LISTED]
    assert len(keys) == len(set(keys))
    for entry in LISTED:
        assert entry["kind"] in ("flag", "env") and len(entry["reason"]) > 20, entry
        assert entry["inventory"] in CELLS, entry


def test_a_flag_added_on_either_side_is_caught():
    name = "h100-4x8.yaml"
    cell = json.loads(json.dumps(CELLS[name]))
    cell["flags"]["enable-symm-mem"] = True
    cell["env"]["NCCL_MNNVL_ENABLE"] = "1"
    found = recipe_diff.differences(name, cell) - {as_listed(e) for e in LISTED}
    assert found == {Difference(name, "flag", "enable-symm-mem", None, True),
                     Difference(name, "env", "NCCL_MNNVL_ENABLE", None, "1")}
    # a flag k3deploy adds: the cell without one of its own flags
    del cell["flags"]["decode-attention-backend"]
    assert Difference(name, "flag", "decode-attention-backend", "flashmla", None) in \
        recipe_diff.differences(name, cell)


def test_aliases_and_negative_spellings_are_one_option():
    assert recipe_diff.canonical("sglang", "tp", "8") == ("tp-size", "8")
    assert recipe_diff.canonical("vllm", "no-enable-flashinfer-autotune", True) == (
        "enable-flashinfer-autotune", False)


def _section(text: str, title: str, level: str) -> str:
    """From `title` to the next heading of `level` ('## ' or '### ') or above."""
    start = text.index(title)
    ends = [text.find(f"\n{h}", start + len(title)) for h in ("## ", level)]
    end = min((e for e in ends if e > 0), default=len(text))
    return text[start:end]


def test_operations_names_each_cell_and_each_difference():
    doc = _section(OPERATIONS.read_text(encoding="utf-8"), "Which recipe each launch follows",
                   "## ")
    for name, cell in CELLS.items():
        part = _section(doc, f"### `{name}`", "### ") if f"### `{name}`" in doc else ""
        assert cell["name"] in part and cell["source"]["commit"][:8] in part, name
        for entry in (e for e in LISTED if e["inventory"] == name):
            spelled = f"--{entry['name']}" if entry["kind"] == "flag" else entry["name"]
            assert spelled in part, (name, spelled)


def test_the_readme_table_names_each_cell():
    text = README.read_text(encoding="utf-8")
    for name, cell in CELLS.items():
        row = next((line for line in text.splitlines() if f"inventories/{name}" in line
                    and line.startswith("|")), "")
        assert cell["name"] in row, name


def test_the_snapshot_is_what_the_checked_in_pages_give():
    import recipe_refresh
    for entry in recipe_refresh.cell_entries():
        cell = recipe_refresh.read_cell(entry, recipe_refresh.RECIPES / "pages")
        assert recipe_refresh.snapshot(entry, cell) == CELLS[entry["inventory"]], entry["name"]
    assert yaml.safe_load((recipe_refresh.RECIPES / "cells.yaml").read_text())

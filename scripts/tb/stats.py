"""`testbed stats`: what the mock Hub served and what each node's stand-ins were asked to do."""
from __future__ import annotations

import json
from pathlib import Path

from tb.nodefs import node_dir
from tb.state import TestbedState


def _read_json(path: Path, default):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return default


def node_calls(tb_dir: Path, name: str) -> list[dict]:
    """Every recorded stand-in invocation; a line being written right now is skipped."""
    path = node_dir(tb_dir, name) / "run" / "calls.jsonl"
    calls = []
    if path.exists():
        for line in path.read_text(errors="replace").splitlines():
            try:
                calls.append(json.loads(line))
            except ValueError:
                continue
    return calls


def _node_names(tb_dir: Path) -> list[str]:
    state = TestbedState.load(tb_dir)
    if state is not None and state.data.get("nodes"):
        return sorted(state.data["nodes"], key=lambda n: state.data["nodes"][n].get("index", 0))
    nodes = Path(tb_dir) / "nodes"
    return sorted(p.name for p in nodes.iterdir()) if nodes.is_dir() else []


EMPTY_CDN = {"bytes": 0, "requests": 0, "authorized_requests": 0, "connections": 0,
             "slow_connections": 0, "by_node": {}}


def collect(tb_dir: Path) -> dict:
    """{"hub": ..., "cdn": ..., "nodes": ...}: the CDN's counters (--hub-cdn; zeros without it)
    come out of the hub's stats.json into their own section."""
    tb_dir = Path(tb_dir).resolve()
    hub = _read_json(tb_dir / "hub" / "stats.json", {})
    cdn = hub.pop("cdn", None) or dict(EMPTY_CDN)
    return {"hub": hub, "cdn": cdn,
            "nodes": {name: {"calls": node_calls(tb_dir, name)} for name in _node_names(tb_dir)}}

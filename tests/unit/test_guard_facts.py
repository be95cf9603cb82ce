"""The guard's documents as the laptop reads them (k3deploy/facts/guard.py), from what the
node-side guard writes: its state file and its incident record (remote/guard.py,
remote/guard_record.py), read back as `cat` prints them."""

from __future__ import annotations

import json
from pathlib import Path

from k3deploy.cluster import inventory
from k3deploy.facts.guard import Failure, GuardState, Incident, parse_incident, parse_pids, \
    parse_state
from k3deploy.node import guard_config
from k3deploy.remote import guard as node_guard
from k3deploy.remote import guard_record
from tests.unit.invdata import four_nodes

SECRET = "guard-secret-value-0123456789"


def node_guard_in(tmp_path: Path, rank: int = 1) -> node_guard.Guard:
    inv = inventory.parse(four_nodes())
    cfg = guard_config.with_digest(guard_config.config(inv, inv.ranked()[rank][1].name), SECRET)
    g = node_guard.Guard(cfg, SECRET)
    g.dir = str(tmp_path)
    g.evidence = lambda: {"log_tail": ["last line"], "kernel": ["NVRM: Xid 79"]}
    g.stop_engine = lambda: "stopped by the guard"
    return g


def cat(path: Path) -> tuple[str, int]:
    """`cat PATH` as the fact runs it: the text and 0, or nothing and 1."""
    return (path.read_text(), 0) if path.is_file() else ("", 1)


def test_a_watching_guards_state_file(tmp_path):
    g = node_guard_in(tmp_path)
    g.engine["id"] = "e575172ed11d"
    g.write_state()
    state = parse_state(*cat(tmp_path / "state.json"))
    assert isinstance(state, GuardState)
    assert (state.phase, state.digest) == ("watching", g.cfg["digest"])
    assert state.pid is not None and state.pid > 0 and state.beat > 0


def test_a_fired_guards_state_and_incident(tmp_path):
    g = node_guard_in(tmp_path)
    g.engine.update(running=False, exit_code=137, finished="2026-12-01T10:20:00.5Z")
    g.fire(g.first_failure())
    assert parse_state(*cat(tmp_path / "state.json")).phase == "fired"
    found = parse_incident(*cat(tmp_path / "incident.json"))
    me = g.cfg["node"]
    assert found == Incident(
        failure=Failure(node=me, rank=1, kind="exited", at="2026-12-01T10:20:00.5Z",
                        cause=f"rank 1 ({me}): engine exited with code 137"),
        seen_by=me, recorded_at=found.recorded_at)
    assert found.recorded_at.startswith("20") and found.recorded_at.endswith("+00:00")


def test_an_adopted_wedge_incident_keeps_the_first_failure(tmp_path):
    g = node_guard_in(tmp_path)
    theirs = guard_record.incident(g.cfg | {"node": "node0"}, guard_record.failure(
        "node3", 3, "wedged", detail="no rank advanced for 61s"), "node0")
    doc = {**guard_record.adopt(g.cfg, theirs, "node0"), "wedge": {"stalled_s": 61.0}}
    found = parse_incident(json.dumps(doc, indent=1), 0)
    assert found.failure.node == "node3" and found.failure.kind == "wedged"
    assert found.seen_by == "node0" and found.recorded_at >= theirs["recorded_at"]


def test_no_file_or_no_object_is_no_document():
    assert parse_state("", 1) is None and parse_incident("", 1) is None
    assert parse_state("not json", 0) is None and parse_incident("[1]", 0) is None


def test_a_document_missing_keys_is_still_read():
    # an incident on record is archived whatever keys it lacks; a state without a pid is
    # no healthy guard's
    assert parse_incident("{}", 0) == Incident(failure=None, seen_by="", recorded_at="")
    assert parse_state('{"phase": "watching"}', 0) == GuardState(pid=None, digest="", beat=0.0,
                                                                 phase="watching")


def test_guard_processes_from_pid_and_parent_lines():
    assert parse_pids("464 1\n", 0) == (464,)
    assert parse_pids("464 1\nx y\n\n", 0) == (464,)

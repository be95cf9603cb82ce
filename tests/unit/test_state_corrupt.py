"""A state file that cannot be read as this version's record is forgotten, not fatal: it is a
record of what k3deploy did, the node's facts are the truth (core/state.py), and the next save
replaces it with a whole, valid file."""

import json

import pytest

from k3deploy.core.state import SCHEMA, NodeState

FRESH = {"schema": SCHEMA, "node": "node0", "identity": None, "steps": {}}
GOOD = {"schema": SCHEMA, "node": "node0", "identity": {"machine_id": "m"},
        "steps": {"launch": {"status": "ok", "attempts": 1}}}

CORRUPT = {
    "truncated": json.dumps(GOOD)[:-7].encode(),
    "empty": b"",
    "not-utf8": b"\xff\xfe\x00garbage",
    "a-list": b"[1, 2]",
    "a-string": b'"node0"',
    "a-number": b"1",
    "null": b"null",
    "older-schema": json.dumps({**GOOD, "schema": 0}).encode(),
    "newer-schema": json.dumps({**GOOD, "schema": SCHEMA + 1}).encode(),
    "steps-not-a-mapping": json.dumps({**GOOD, "steps": ["launch"]}).encode(),
}


@pytest.mark.parametrize("content", CORRUPT.values(), ids=CORRUPT.keys())
def test_corrupt_state_file_starts_a_fresh_record_and_is_replaced(tmp_path, content):
    (tmp_path / "node0.json").write_bytes(content)
    state = NodeState(tmp_path, "node0")
    assert state.data == FRESH
    state.begin("launch", "digest-1")
    state.flush()
    saved = json.loads((tmp_path / "node0.json").read_text())
    assert saved["steps"]["launch"]["status"] == "running" and saved["schema"] == SCHEMA


def test_a_valid_file_is_kept(tmp_path):
    (tmp_path / "node0.json").write_text(json.dumps(GOOD))
    assert NodeState(tmp_path, "node0").data == GOOD


def test_a_look_that_found_nothing_to_do_waits_for_the_next_write(tmp_path):
    state = NodeState(tmp_path, "node0")
    path = tmp_path / "node0.json"
    state.begin("preflight", "d")
    assert not path.exists()  # decided from facts at hand: no write yet
    state.flush()  # the runner, before it looks at the node
    assert json.loads(path.read_text())["steps"]["preflight"]["status"] == "running"
    state.finish("preflight", "ok")
    assert json.loads(path.read_text())["steps"]["preflight"]["status"] == "running"
    state.begin("launch", "d")
    state.finish("launch", "changed")  # a change is on record at once, with the ok before it
    saved = json.loads(path.read_text())["steps"]
    assert (saved["preflight"]["status"], saved["launch"]["status"]) == ("ok", "changed")
    state.begin("verify", "d")
    state.finish("verify", "failed", error="endpoint refused")
    assert json.loads(path.read_text())["steps"]["verify"]["last_error"] == "endpoint refused"
    state.flush()
    assert not state.unsaved


def test_a_new_identity_is_kept_at_the_next_write(tmp_path):
    state = NodeState(tmp_path, "node0")
    state.check_identity({"machine_id": "m", "boot_id": "b"})
    assert state.unsaved
    state.flush()
    assert json.loads((tmp_path / "node0.json").read_text())["identity"]["machine_id"] == "m"
    state.check_identity({"machine_id": "m", "boot_id": "b"})
    assert not state.unsaved  # the same machine: nothing to write

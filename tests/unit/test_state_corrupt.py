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
    saved = json.loads((tmp_path / "node0.json").read_text())
    assert saved["steps"]["launch"]["status"] == "running" and saved["schema"] == SCHEMA


def test_a_valid_file_is_kept(tmp_path):
    (tmp_path / "node0.json").write_text(json.dumps(GOOD))
    assert NodeState(tmp_path, "node0").data == GOOD

"""State files survive SIGKILL mid-write; the lock keeps two runs apart."""

import json
import multiprocessing
import os
import signal
import subprocess
import sys

import pytest

from k3deploy.core.errors import LockError
from k3deploy.core.redact import register
from k3deploy.core.state import ClusterLock, NodeState, atomic_write_json
from polling import wait_until

WRITER = """
import sys
from pathlib import Path
from k3deploy.core.state import atomic_write_json
path = Path(sys.argv[1])
i = 0
while True:
    i += 1
    atomic_write_json(path, {"i": i, "pad": "x" * 200000})
"""


def stamp(path):
    """What changes with every atomic replace of path (None while it does not exist)."""
    try:
        found = path.stat()
    except FileNotFoundError:
        return None
    return found.st_ino, found.st_mtime_ns


def test_sigkill_mid_write_leaves_a_readable_file(tmp_path):
    path = tmp_path / "node0.json"
    for _ in range(5):
        before = stamp(path)
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)])
        # Once this writer has replaced the file it writes without pause: the kill lands in
        # the middle of a write (a fixed sleep could end before a slow start wrote anything).
        wait_until(lambda before=before: stamp(path) != before, 30, "the writer's first write")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        data = json.loads(path.read_text())
        assert data["i"] >= 1 and len(data["pad"]) == 200000
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_step_records_and_secret_redaction(tmp_path):
    register("hf_SECRETSECRETSECRETSECRET")
    state = NodeState(tmp_path, "node0")
    state.begin("download", "abc")
    state.finish("download", "failed", error="401 for token hf_SECRETSECRETSECRETSECRET")
    text = (tmp_path / "node0.json").read_text()
    assert "hf_SECRET" not in text and "***" in text
    again = NodeState(tmp_path, "node0")
    rec = again.step("download")
    assert rec["status"] == "failed" and rec["attempts"] == 1 and rec["inputs_digest"] == "abc"


def test_identity_change_discards_steps(tmp_path):
    state = NodeState(tmp_path, "node0")
    assert not state.check_identity({"boot_id": "a"})
    state.finish("nvme", "changed")
    assert state.check_identity({"boot_id": "b"})
    assert state.data["steps"] == {}


def _hold(directory, ready, release):
    with ClusterLock(directory):
        ready.set()
        release.wait(10)


def test_second_run_fails_with_clear_lock_message(tmp_path):
    ready, release = multiprocessing.Event(), multiprocessing.Event()
    holder = multiprocessing.Process(target=_hold, args=(tmp_path, ready, release))
    holder.start()
    try:
        assert ready.wait(10)
        with pytest.raises(LockError) as err:
            ClusterLock(tmp_path).acquire()
        assert f"k3deploy pid {holder.pid}" in str(err.value)
        assert err.value.exit_code == 2
    finally:
        release.set()
        holder.join(10)
    with ClusterLock(tmp_path):  # released once the holder is gone
        pass


def test_lock_is_released_when_holder_is_killed(tmp_path):
    ready, release = multiprocessing.Event(), multiprocessing.Event()
    holder = multiprocessing.Process(target=_hold, args=(tmp_path, ready, release))
    holder.start()
    assert ready.wait(10)
    os.kill(holder.pid, signal.SIGKILL)
    holder.join(10)
    with ClusterLock(tmp_path):
        pass


def test_atomic_write_replaces_whole_file(tmp_path):
    path = tmp_path / "x.json"
    atomic_write_json(path, {"a": 1})
    atomic_write_json(path, {"b": 2})
    assert json.loads(path.read_text()) == {"b": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]


def test_status_marks_running_steps_of_a_dead_run_interrupted():
    from k3deploy.cli.status_cmd import _settled
    steps = {"download": {"status": "running"}, "nvme": {"status": "ok"}}
    assert _settled(steps, idle=True) == {"download": {"status": "interrupted"},
                                          "nvme": {"status": "ok"}}
    assert _settled(steps, idle=False) == steps


def test_status_shows_steps_of_a_replaced_machine_as_stale():
    from k3deploy.cli.status_cmd import _node_view
    state = {"identity": {"boot_id": "a", "machine_id": "m"}, "steps": {"nvme": {"status": "ok"}}}
    same = _node_view(1, {"identity": {"boot_id": "a", "machine_id": "m"}}, state, idle=True)
    assert same["state"]["nvme"]["status"] == "ok" and not same["replaced"]
    other = _node_view(1, {"identity": {"boot_id": "b", "machine_id": "m"}}, state, idle=True)
    assert other["state"]["nvme"]["status"] == "stale" and other["replaced"]
    gone = _node_view(1, {"reachable": False}, state, idle=True)
    assert gone["state"]["nvme"]["status"] == "ok" and not gone["replaced"]

"""Fixtures for the core integration tests (test_core_*.py): run the k3deploy CLI as a user
would, write small `file`-step playbooks, and read what each node's sshd logged.

The testbed's sshd runs with `-e`, so its log (one "Accepted publickey" line per authenticated
connection, "[preauth]" lines for connections that never logged in) lands in
DIR/nodes/<name>/init.log: that is where connections are counted, at the server side.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def _env(extra: dict | None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("K3DEPLOY_")}
    env.update({"COLUMNS": "200", **(extra or {})})
    return env


@pytest.fixture
def k3():
    """k3(*args, timeout=..) -> CompletedProcess with .output (stdout+stderr) and .seconds."""
    def run(*args, timeout: float = 120, env: dict | None = None, cwd=REPO):
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "k3deploy", *map(str, args)],
                              capture_output=True, text=True, timeout=timeout, cwd=cwd,
                              env=_env(env))
        proc.seconds = time.monotonic() - started
        proc.output = proc.stdout + proc.stderr
        return proc
    return run


@pytest.fixture
def k3_background():
    """Start k3deploy without waiting; every process still running at the end is killed."""
    started: list[subprocess.Popen] = []

    def start(*args, env: dict | None = None) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-m", "k3deploy", *map(str, args)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=REPO, env=_env(env), start_new_session=True)
        proc.started = time.monotonic()
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)


@pytest.fixture
def file_playbook(tmp_path):
    """file_playbook(dict(path=.., content=..), ...) -> a playbook of `file` steps."""
    count = iter(range(1000))

    def write(*files: dict) -> Path:
        path = tmp_path / f"playbook{next(count)}.yaml"
        doc = {"name": "core-test", "steps": [{"step": "file", "with": f} for f in files]}
        path.write_text(yaml.safe_dump(doc))
        return path
    return write


@pytest.fixture
def sshd_log():
    """sshd_log(tb, node) -> the lines that node's sshd logged so far."""
    def lines(tb, node: str) -> list[str]:
        path = Path(tb.dir) / "nodes" / node / "init.log"
        return path.read_text(errors="replace").splitlines()
    return lines


@pytest.fixture
def node_state():
    """node_state(tb, node) -> the node's k3deploy state file (next to the inventory)."""
    def read(tb, node: str) -> dict:
        return json.loads(state_path(tb, node).read_text())
    read.path = state_path
    return read


def state_path(tb, node: str) -> Path:
    cluster = yaml.safe_load(Path(tb.inventory).read_text())["cluster"]
    return Path(tb.inventory).parent / ".k3deploy" / cluster / f"{node}.json"


@pytest.fixture
def wait_for():
    """wait_for(predicate, timeout, what) polls until predicate() is truthy."""
    def poll(predicate, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}")
    return poll

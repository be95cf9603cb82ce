"""Fixtures for the core integration tests (test_core_*.py): run the k3deploy CLI as a user
would, write small `file`-step playbooks, read what each node's sshd logged, and share one
2-node testbed between the tests of a module that leave no trace another test could see.

The testbed's sshd runs with `-e`, so its log (one "Accepted publickey" line per authenticated
connection, "[preauth]" lines for connections that never logged in) lands in
DIR/nodes/<name>/init.log: that is where connections are counted, at the server side.
"""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from k3run import bounded_run, stop_background
from polling import wait_until
from tb import hub as tbhub
from tbfixture import inventory_copy, testbed

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def no_cli_left_running():
    """A k3deploy started in the background (k3run.k3_bg) is gone when its test ends, also when
    the test failed before waiting for it."""
    yield
    stop_background()


def _env(extra: dict | None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("K3DEPLOY_")}
    env.update({"COLUMNS": "200", **(extra or {})})
    return env


@pytest.fixture
def k3():
    """k3(*args, timeout=..) -> CompletedProcess with .output (stdout+stderr) and .seconds."""
    def run(*args, timeout: float = 120, env: dict | None = None, cwd=REPO):
        started = time.monotonic()
        proc = bounded_run([sys.executable, "-m", "k3deploy", *map(str, args)], timeout,
                           cwd=cwd, env=_env(env))
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
    """wait_for(predicate, timeout, what): wait_until as a fixture."""
    return wait_until


@pytest.fixture
def hub(tmp_path):
    """A small mock Hub on loopback (4 shards of 60 kB) for the test_fetch_weights*.py modules."""
    with tbhub.serve_in_thread(tmp_path / "hub", shards=4, shard_bytes=60_000) as handle:
        yield handle


# --- one 2-node testbed per module, for tests that leave no trace --------------------------------

NODE_RESET = (Path(__file__).parent / "node_reset.py").read_text()


@pytest.fixture(scope="module")
def shared_2node(tmp_path_factory):
    """A 2-node testbed for the whole module; node1 logs in as ubuntu (sudo), node0 as root.
    Taken down, with the leftover check, when the module's last test is done. `.baseline` is
    what each node held at the start (node_reset.py's view)."""
    with testbed(tmp_path_factory.mktemp("shared"), nodes=2,
                 overrides={"node1": {"user": "ubuntu"}}) as tb:
        tb.baseline = dict(zip(tb.nodes, _on_each(tb, lambda node: _node_reset(tb, node))))
        yield tb


@pytest.fixture
def tb2(shared_2node, tmp_path):
    """The module's shared testbed through an inventory of this test's own (in tmp_path): state
    files, the cluster lock and secrets sit next to the inventory, so no test sees another's.
    Afterwards, pass or fail, each node is put back to its baseline: what the test left in /tmp
    and /mnt/nvme is removed, processes it left (a probe blocked on a FIFO) are killed."""
    tb = shared_2node
    yield dataclasses.replace(tb, inventory=inventory_copy(tb, tmp_path))
    _on_each(tb, lambda node: _node_reset(tb, node, tb.baseline[node]))


def _on_each(tb, fn) -> list:
    """fn(node) on every node at once (each is an SSH round trip)."""
    with ThreadPoolExecutor(len(tb.nodes)) as pool:
        return list(pool.map(fn, tb.nodes))


def _node_reset(tb, node: str, baseline: dict | None = None) -> dict | None:
    """node_reset.py on the node: what it holds now, or (given a baseline) put it back to that."""
    argv = ["python3", "-c", NODE_RESET] + ([json.dumps(baseline)] if baseline else [])
    res = tb.ssh(node, argv, user="root")
    assert res.returncode == 0, f"{node}: {res.stderr}"
    return None if baseline else json.loads(res.stdout)

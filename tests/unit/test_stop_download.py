"""stop-download on this machine's own shell and /proc: the probe finds the detached
downloader by its pid file only while that pid still is fetch_weights (pids are reused), and
the planned command stops it (SIGTERM, which the real downloader handles by finishing the file
it writes). Facts in from a real look, the action's argv run as the node would run it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from k3deploy.cluster import inventory
from k3deploy.node.context import NodeContext, RunContext
from k3deploy.steps.weights.download import Paths
from k3deploy.steps.teardown import DownloaderFacts, StopDownload
from tests.unit.fakes import FakeSession
from tests.unit.invdata import four_nodes

# Exits 1 on SIGTERM (a KILL would show as -9), and says when its handler is in place.
SLEEPER = ("import pathlib, signal, sys, time\n"
           "signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))\n"
           "pathlib.Path(sys.argv[1]).touch()\ntime.sleep(120)\n")


def node(tmp_path) -> NodeContext:
    inv = inventory.parse(four_nodes(paths={"nvme": str(tmp_path)}))
    run = RunContext(inv=inv, session=FakeSession(inv, tmp_path))
    return NodeContext(run, inv.ranked()[1][1], 1)


def look(step, ctx) -> DownloaderFacts:
    (fact,) = step.probes(ctx)
    res = subprocess.run(["sh", "-c", fact.script], capture_output=True, text=True)
    return step.observe({fact.name: fact.parse(res.stdout, res.returncode)}, ctx)


def started(tmp_path, name: str, ctx) -> subprocess.Popen:
    """The process, reaped the moment it exits (as init reaps the node's detached downloader:
    a zombie would still answer the stop script's `kill -0`)."""
    script = tmp_path / name
    script.write_text(SLEEPER)
    ready = tmp_path / f"{name}.ready"
    proc = subprocess.Popen([sys.executable, str(script), str(ready)])
    threading.Thread(target=proc.wait, daemon=True).start()
    while not ready.exists() and proc.poll() is None:
        time.sleep(0.01)
    pid_file = Paths(ctx).pid
    os.makedirs(os.path.dirname(pid_file), exist_ok=True)
    with open(pid_file, "w") as f:
        f.write(f"{proc.pid}\n")
    return proc


def test_a_running_downloader_is_found_and_stopped(tmp_path):
    ctx, step = node(tmp_path), StopDownload()
    proc = started(tmp_path, "fetch_weights.py", ctx)
    try:
        facts = look(step, ctx)
        assert facts == DownloaderFacts(downloader=proc.pid)
        (action,) = step.plan(facts, ctx)
        subprocess.run(list(action.argv), check=True, timeout=60)
        assert proc.wait(timeout=30) == 1   # its SIGTERM handler ran: not the 10 s KILL
        assert step.plan(look(step, ctx), ctx) == []   # looked at again: nothing left to do
    finally:
        proc.kill()
        proc.wait()


def test_a_reused_pid_that_is_not_the_downloader_is_left_alone(tmp_path):
    ctx, step = node(tmp_path), StopDownload()
    proc = started(tmp_path, "something_else.py", ctx)
    try:
        assert step.plan(look(step, ctx), ctx) == []
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_no_pid_file_means_nothing_to_stop(tmp_path):
    ctx, step = node(tmp_path), StopDownload()
    assert step.plan(look(step, ctx), ctx) == []

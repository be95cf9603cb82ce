"""A download wait's look is held on the node until the downloader ends (at most a poll), so
the laptop sees the end at once, not up to a poll plus a round trip later. The hold runs first
among the look's Python facts (they run in order), so the status read after it sees what
ended it; the waiter paces looks by their start, so a held look adds no sleep of its own."""

import json
import os
import subprocess
import sys
import time

from k3deploy.node import facts as F
from k3deploy.remote import bundled
from k3deploy.steps.weights.download import HOLD, DownloadWeights
from tests.unit.test_download_peers import ctx


def _hold(tmp_path, state, pid, seconds=3.0) -> float:
    progress, pid_file = tmp_path / "progress.json", tmp_path / "pid"
    progress.write_text(json.dumps({"schema": 1, "pid": pid, "state": state}))
    pid_file.write_text(f"{pid}\n")
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", bundled("download_hold.py", ("protocol.py", "weights_status.py")),
                    str(progress), str(pid_file), str(seconds)], check=True, timeout=30)
    return time.monotonic() - started


def test_a_running_download_holds_the_look_for_the_poll(tmp_path):
    # a live process with fetch_weights.py in its argv stands in for the downloader
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)",
                             "/work/fetch_weights.py"])
    try:
        assert _hold(tmp_path, "running", live.pid, seconds=1.0) >= 1.0
    finally:
        live.kill()
        live.wait()


def test_a_finished_or_dead_download_ends_the_hold_at_once(tmp_path):
    assert _hold(tmp_path, "done", os.getpid()) < 2.5
    assert _hold(tmp_path, "running", 2 ** 22 + 7) < 2.5   # no such process: it died


def test_the_hold_is_in_a_waits_look_only_and_first_in_it(tmp_path, monkeypatch):
    asked = []

    def gather(conn, facts, step=None, timeout=None):
        asked.append([f.name for f in facts])
        raise LookedAt()
    monkeypatch.setattr(F, "gather", gather)
    node, step = ctx(tmp_path, rank=0), DownloadWeights()
    for waiting in (False, True):
        try:
            step.facts(node, waiting=waiting)
        except LookedAt:
            pass
    plain, held = asked
    assert "hold" not in plain and held[0] == "hold" and held[1:] == plain
    hold = step.wait_probes(node)[0]
    assert hold.program[0] == HOLD and hold.program[1][-1] == "5"   # progress_seconds
    python = F.compose(step.wait_probes(node) + step.probes(node)).split("python3 - ", 1)[1]
    assert python.index("'hold'") < python.index("'status'")   # run in that order on the node


class LookedAt(Exception):
    pass


def test_the_hold_is_progress_seconds_and_never_shorter_than_a_poll(tmp_path):
    node = ctx(tmp_path, rank=0)
    assert DownloadWeights({"progress_seconds": 2}).wait_probes(node)[0].program[1][-1] == "2"
    assert DownloadWeights({"progress_seconds": 2, "poll_seconds": 3}).wait_probes(node)[0].program[1][-1] == "3"

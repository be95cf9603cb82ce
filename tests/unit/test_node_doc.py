"""The one reading of a node document a k3deploy process rewrites while it works
(remote/protocol.py read_document): the downloader's progress and the guard's state, read by
`status`, `watch`, the download step and its hold alike. A writer killed without writing its end
(SIGKILL, the OOM killer, a reboot) leaves a document saying it works: that reads as stopped,
with when and how it was last seen."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from k3deploy.cli import status_docs, status_view
from k3deploy.facts import download
from k3deploy.facts.guard import GuardState
from k3deploy.facts.node_doc import parse_reading
from k3deploy.remote import bundled, protocol
from k3deploy.steps import guard as guard_step
from k3deploy.cli import status_cmd
from tests.unit.download_facts import facts as download_facts

NO_SUCH_PID = 2 ** 22 + 7   # above the kernel's default pid_max: never a process
WRITTEN = 1_765_000_000.0   # 2025-12-06T05:46:40Z


@pytest.fixture
def process():
    """A live process with the given argv after `python -c "sleep"`; killed at the end."""
    started = []

    def start(*argv: str) -> int:
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", *argv])
        started.append(proc)
        # until its exec, the child's argv is this process's
        deadline = time.monotonic() + 30
        while b"time.sleep(60)" not in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
            assert time.monotonic() < deadline, "the stand-in process never started"
            time.sleep(0.01)
        return proc.pid
    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def progress_file(tmp_path, state: str, pid: int | None, **more) -> str:
    path = tmp_path / "download-progress.json"
    path.write_text(json.dumps({"schema": 1, "pid": pid, "state": state, "bytes_done": 43,
                                "bytes_total": 100, **more}))
    os.utime(path, (WRITTEN, WRITTEN))
    return str(path)


def test_a_live_writer_reads_as_its_document_says(tmp_path, process):
    pid = process("/work/fetch_weights.py", "--manifest", "m.json")
    seen = protocol.read_document(progress_file(tmp_path, "running", pid), protocol.DOWNLOADER)
    assert (seen.state, seen.said, seen.alive) == ("running", "running", True)
    assert seen.written == WRITTEN and seen.age == pytest.approx(time.time() - WRITTEN, abs=5)
    assert seen.doc["bytes_done"] == 43


def test_a_dead_writers_still_running_reads_as_stopped_with_when(tmp_path):
    seen = protocol.read_document(progress_file(tmp_path, "running", NO_SUCH_PID),
                                  protocol.DOWNLOADER)
    assert (seen.state, seen.said, seen.alive, seen.written) == \
        (protocol.STOPPED, "running", False, WRITTEN)


def test_a_pid_the_kernel_gave_to_another_program_is_not_the_writer(tmp_path, process):
    # this test's own process, and one whose program text merely names the downloader
    for pid in (os.getpid(), process("print('fetch_weights.py')")):
        seen = protocol.read_document(progress_file(tmp_path, "running", pid), protocol.DOWNLOADER)
        assert seen.state == protocol.STOPPED and not seen.alive, pid


def test_an_ended_writer_keeps_its_end(tmp_path):
    for state in ("done", "failed"):
        seen = protocol.read_document(progress_file(tmp_path, state, NO_SUCH_PID),
                                      protocol.DOWNLOADER)
        assert seen.state == state and not seen.alive


def test_the_pid_file_names_a_writer_before_its_first_document(tmp_path, process):
    pid_file = tmp_path / "download.pid"
    pid_file.write_text(f"{process('/work/fetch_weights.py')}\n")
    missing = str(tmp_path / "nothing-yet.json")
    seen = protocol.read_document(missing, protocol.DOWNLOADER, str(pid_file))
    assert (seen.state, seen.alive, seen.doc, seen.written) == ("starting", True, None, None)
    # the pid file's writer lives: a document naming a dead pid (a restart's) is still its
    seen = protocol.read_document(progress_file(tmp_path, "running", NO_SUCH_PID),
                                  protocol.DOWNLOADER, str(pid_file))
    assert seen.state == "running" and seen.alive
    pid_file.write_text(f"{NO_SUCH_PID}\n")
    assert protocol.read_document(missing, protocol.DOWNLOADER, str(pid_file)).state is None


def test_an_unreadable_document_says_so(tmp_path):
    path = tmp_path / "download-progress.json"
    path.write_text('{"schema": 1, "state": "runn')
    seen = protocol.read_document(str(path), protocol.DOWNLOADER)
    assert seen.state == protocol.UNREADABLE and "JSONDecodeError" in seen.error
    path.write_text("[1, 2]")
    assert protocol.read_document(str(path), protocol.DOWNLOADER).error == "not a JSON object"


def test_the_node_program_prints_the_reading_the_laptop_parses(tmp_path):
    path = progress_file(tmp_path, "running", NO_SUCH_PID)
    ran = subprocess.run([sys.executable, "-c", bundled("doc_reading.py"), "download", path,
                          str(tmp_path / "no.pid")], capture_output=True, text=True, timeout=30)
    seen = parse_reading(ran.stdout, ran.returncode)
    assert (seen.state, seen.said, seen.written) == (protocol.STOPPED, "running", WRITTEN)
    broken = parse_reading("Traceback ...\nNameError: name 'x' is not defined\n", 1)
    assert broken.state == protocol.UNREADABLE and "NameError" in broken.error


def test_the_download_steps_status_reads_the_same(tmp_path):
    """weights_status.py, the run's look, carries the same reading as status."""
    manifest = {"schema": 1, "repo": "o/m", "sha": "a" * 40, "files": []}
    ran = subprocess.run([sys.executable, "-c", bundled("weights_status.py"), str(tmp_path),
                          progress_file(tmp_path, "running", NO_SUCH_PID),
                          str(tmp_path / "no.pid")], input=json.dumps(manifest),
                         capture_output=True, text=True, timeout=30)
    status = download.parse_status(ran.stdout, ran.returncode)
    assert status.running is False and status.downloader.state == protocol.STOPPED
    assert status.downloader.written == WRITTEN


def test_the_run_names_a_downloader_that_died_without_a_word():
    dead = download_facts(progress={}, downloader={
        "state": "stopped", "said": "running", "alive": False, "written": WRITTEN, "age": 95.2,
        "doc": None})
    assert dead.error == ("the downloader died without a word: its progress, last written 95s "
                          "ago, still said 'running'")
    assert download_facts(progress={"error": "disk full"}).error == "disk full"


def test_status_json_and_lines_say_the_download_stopped_and_when():
    stopped = protocol.reading({"state": "running", "bytes_done": 43, "bytes_total": 100,
                                "shards_done": 1, "shards_total": 4}, protocol.DOWNLOADER,
                               live_pid=None, written=WRITTEN, now=WRITTEN + 95)
    view = status_docs.download_view(stopped)
    assert view["state"] == "stopped" and view["writer_alive"] is False
    assert view["last_seen"] == {"at": "2025-12-06T05:46:40Z", "seconds_ago": 95,
                                 "state": "running", "percent": 43.0}
    going = status_docs.download_view(protocol.reading(
        {"state": "running", "bytes_done": 10, "bytes_total": 100}, protocol.DOWNLOADER,
        live_pid=4242, written=WRITTEN, now=WRITTEN + 1))
    assert going["state"] == "running" and "last_seen" not in going
    assert status_docs.download_view(protocol.reading(None, protocol.DOWNLOADER, None)) is None

    live = {"reachable": True, "incident": None, "container": None}
    doc = {"cluster": {"name": "c", "state": "down", "incident": None}, "run_active": False,
           "cost": None, "nodes": {
               "node0": {"rank": 0, "state": {}, "live": {**live, "download": going}},
               "node1": {"rank": 1, "state": {}, "live": {**live, "download": view}}}}
    text = "\n".join(status_view.render(doc, []))
    assert ("node1: download stopped at 43%: its downloader is gone, last seen running at "
            "2025-12-06T05:46:40Z (95s before this look)") in " ".join(text.split())
    rows = {ln.split()[1]: ln for ln in text.splitlines() if ln.split()[0] in ("0", "1")}
    assert "stopped 43%" in rows["node1"] and " 10% " in rows["node0"]
    assert "node0: download stopped" not in text


def test_the_guards_state_reads_the_same_way():
    state = GuardState(pid=7, digest="d", beat=100.0, phase="watching")

    def facts(pids, guard_state=state):
        return guard_step.looked({"guard_state": guard_state, "guard_pids": pids, "now": 130,
                                  "incident": None})
    assert facts((7,)).reading().state == "watching"
    dead = facts(()).reading()
    assert (dead.state, dead.said, dead.written, dead.age) == (protocol.STOPPED, "watching",
                                                               100.0, 30.0)
    assert status_cmd.guard_label(facts(()), True) == "stopped"
    # another guard runs, not the one whose state it is: this state's writer is dead
    assert facts((8,)).reading().state == protocol.STOPPED
    assert not guard_step.healthy(facts((8,)), "d") and guard_step.healthy(facts((7,)), "d")
    fired = GuardState(pid=7, digest="d", beat=100.0, phase="fired")
    assert status_cmd.guard_label(facts((), fired), True) == "fired"
    assert status_cmd.guard_label(facts((), None), True) == "not running"

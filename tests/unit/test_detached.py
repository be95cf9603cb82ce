"""node/detached.py's two loops on this machine's sh: a start that waits until the program
says it is up (or died), and a stop that gives a grace period, then SIGKILL."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from k3deploy.node import detached

UP_LATER = "import pathlib, sys, time\ntime.sleep(0.3)\npathlib.Path(sys.argv[1]).write_text('up')\ntime.sleep(120)\n"
DIES = "import sys\nprint('bad config: no such file')\nsys.exit(2)\n"
DEAF = ("import pathlib, signal, sys, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "pathlib.Path(sys.argv[1]).write_text('up')\ntime.sleep(120)\n")


def sh(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", script, "sh", *args], capture_output=True, text=True,
                          timeout=120)


def program(tmp_path, source: str) -> list[str]:
    path = tmp_path / "prog.py"
    path.write_text(source)
    return [sys.executable, str(path), str(tmp_path / "ready")]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not open(f"/proc/{pid}/stat").read().split(") ")[-1].startswith("Z")


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def test_start_waits_for_ready_and_names_the_process_in_the_pid_file(tmp_path):
    argv, pid_file = program(tmp_path, UP_LATER), tmp_path / "prog.pid"
    started = sh(detached.start(argv, str(tmp_path / "log"), str(tmp_path / "ready"),
                                tenths=300, pid_file=str(pid_file), fail_tail=5))
    assert started.returncode == 0, started
    assert (tmp_path / "ready").read_text() == "up"   # the start returned only once it was up
    pid = int(pid_file.read_text())
    try:
        assert alive(pid) and os.getsid(pid) == pid   # its own session: SSH's end spares it
    finally:
        assert sh(detached.stop("$1", tenths=50), str(pid)).returncode == 0
        assert gone_within(pid, 30)


def test_a_program_that_dies_at_start_ends_the_wait_with_its_log(tmp_path):
    argv = program(tmp_path, DIES)
    began = time.monotonic()
    started = sh(detached.start(argv, str(tmp_path / "log"), str(tmp_path / "ready"),
                                tenths=600, fail_tail=5))
    assert started.returncode == 1 and "bad config: no such file" in started.stdout
    assert time.monotonic() - began < 55   # kill -0 saw it die: not the whole 60 s


def test_stop_kills_what_ignores_sigterm_after_the_grace(tmp_path):
    proc = subprocess.Popen(program(tmp_path, DEAF))
    threading.Thread(target=proc.wait, daemon=True).start()   # reaped as init would
    while not (tmp_path / "ready").exists():
        time.sleep(0.01)
    assert sh(detached.stop("$1", tenths=3), str(proc.pid)).returncode == 0
    assert proc.wait(timeout=30) == -9

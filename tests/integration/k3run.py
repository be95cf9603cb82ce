"""Run the k3deploy CLI as a user would, as a subprocess, for integration tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# A CLI call's bound: below the per-test ceiling (pyproject's `timeout = 300`), so a hang is
# reported here, with what the command printed, rather than by pytest-timeout's kill.
CLI_TIMEOUT = 240


def bounded_run(argv: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run(argv, capture_output=True, text=True) that, past `timeout`, fails with
    the command's output so far instead of a bare TimeoutExpired."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired as err:
        said = [_text(err.stdout), _text(err.stderr)]
        raise AssertionError(f"{' '.join(map(str, argv))[:300]} did not end within {timeout:g}s; "
                             f"its output so far:\n{said[0]}\n{said[1]}") from None


def _text(data) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else data or ""


def k3(*args: str, env: dict | None = None, timeout: float = CLI_TIMEOUT) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return bounded_run([sys.executable, "-m", "k3deploy", *args], timeout, cwd=REPO, env=full_env)


_BACKGROUND: list[subprocess.Popen] = []   # every k3_bg process, until stop_background()


def k3_bg(*args: str, env: dict | None = None) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "k3deploy", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, cwd=REPO,
                            env={**os.environ, **(env or {})})
    _BACKGROUND.append(proc)
    return proc


def stop_background() -> list[int]:
    """Kill the k3_bg processes still running (a test that failed before waiting for one);
    returns their pids. The node-side processes they started go with the testbed."""
    left = [p for p in _BACKGROUND if p.poll() is None]
    for proc in left:
        proc.kill()
        proc.wait()
    _BACKGROUND.clear()
    return [p.pid for p in left]


def out(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout + proc.stderr


def state(inventory: Path, node: str) -> dict:
    cluster_dirs = list((inventory.parent / ".k3deploy").iterdir())
    return json.loads((cluster_dirs[0] / f"{node}.json").read_text())


WRITES = {("docker", "pull"), ("docker", "run"), ("docker", "rm"), ("docker", "stop"),
          ("docker", "exec"), ("systemctl", "start"), ("systemctl", "stop"),
          ("systemctl", "restart"), ("systemctl", "reset-failed")}


def changing_calls(stats: dict) -> list[list[str]]:
    """Stand-in invocations that change a node (pull, run, restart...), over all nodes."""
    found = []
    for node in stats["nodes"].values():
        for call in node["calls"]:
            argv = [a for a in call["argv"] if not a.startswith("-")]
            if len(argv) >= 2 and (os.path.basename(argv[0]), argv[1]) in WRITES:
                found.append(call["argv"])
    return found

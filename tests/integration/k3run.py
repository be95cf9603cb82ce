"""Run the k3deploy CLI as a user would, as a subprocess, for integration tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def k3(*args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "k3deploy", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO, env=full_env)


def k3_bg(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "k3deploy", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, cwd=REPO,
                            env={**os.environ, **(env or {})})


def out(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout + proc.stderr


def state(inventory: Path, node: str) -> dict:
    cluster_dirs = list((inventory.parent / ".k3deploy").iterdir())
    return json.loads((cluster_dirs[0] / f"{node}.json").read_text())


WRITES = {("docker", "pull"), ("docker", "run"), ("docker", "rm"), ("docker", "stop"),
          ("docker", "exec"), ("systemctl", "start"), ("systemctl", "stop"),
          ("systemctl", "restart")}


def changing_calls(stats: dict) -> list[list[str]]:
    """Stand-in invocations that change a node (pull, run, restart...), over all nodes."""
    found = []
    for node in stats["nodes"].values():
        for call in node["calls"]:
            argv = [a for a in call["argv"] if not a.startswith("-")]
            if len(argv) >= 2 and (os.path.basename(argv[0]), argv[1]) in WRITES:
                found.append(call["argv"])
    return found

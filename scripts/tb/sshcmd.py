"""The ssh client command line for a testbed node: its key, its known_hosts, nothing from ~/.ssh."""
from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

KEY_FILE = "id_ed25519"
KNOWN_HOSTS_FILE = "known_hosts"


def ssh_argv(tb_dir: Path, user: str, address: str, command: str | None = None,
             connect_timeout: float = 5, port: int = 22) -> list[str]:
    """port: a node's port on the `up --ssh-gateway` address (known_hosts names it [address]:port)."""
    tb_dir = Path(tb_dir)
    argv = ["ssh", "-F", "/dev/null", "-p", str(port), "-i", str(tb_dir / KEY_FILE),
            "-o", "IdentitiesOnly=yes",
            "-o", f"UserKnownHostsFile={tb_dir / KNOWN_HOSTS_FILE}",
            "-o", "GlobalKnownHostsFile=/dev/null",
            "-o", "StrictHostKeyChecking=yes",
            "-o", "BatchMode=yes",
            "-o", f"ConnectTimeout={max(1, round(connect_timeout))}",
            "-o", "LogLevel=ERROR",
            # The key exchange k3deploy's transport (Paramiko) negotiates. OpenSSH's default, the
            # sntrup761 hybrid, costs the client about 7x the CPU per login (78 vs 11 ms),
            # and the tests and the testbed's own checks log in over a thousand times a run.
            "-o", "KexAlgorithms=curve25519-sha256",
            f"{user}@{address}"]
    if command is not None:
        argv += ["--", command]
    return argv


def login_until(argv: list[str], deadline: float,
                gone: Callable[[], bool] = lambda: False) -> str | None:
    """Run `argv` (an ssh login) until it succeeds (None) or the deadline passes (the last
    error). `gone`: the node's init exited, so waiting longer cannot help."""
    error = "timed out"
    while time.monotonic() < deadline:
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        except subprocess.TimeoutExpired:
            error = "ssh timed out"
            continue
        if proc.returncode == 0:
            return None
        error = proc.stderr.strip() or f"ssh exit {proc.returncode}"
        if gone():
            return f"init exited ({error})"
        time.sleep(0.2)
    return error

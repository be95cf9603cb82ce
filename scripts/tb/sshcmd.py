"""The ssh client command line for a testbed node: its key, its known_hosts, nothing from ~/.ssh."""
from __future__ import annotations

from pathlib import Path

KEY_FILE = "id_ed25519"
KNOWN_HOSTS_FILE = "known_hosts"


def ssh_argv(tb_dir: Path, user: str, address: str, command: str | None = None,
             connect_timeout: float = 5) -> list[str]:
    tb_dir = Path(tb_dir)
    argv = ["ssh", "-F", "/dev/null", "-i", str(tb_dir / KEY_FILE),
            "-o", "IdentitiesOnly=yes",
            "-o", f"UserKnownHostsFile={tb_dir / KNOWN_HOSTS_FILE}",
            "-o", "GlobalKnownHostsFile=/dev/null",
            "-o", "StrictHostKeyChecking=yes",
            "-o", "BatchMode=yes",
            "-o", f"ConnectTimeout={max(1, round(connect_timeout))}",
            "-o", "LogLevel=ERROR",
            f"{user}@{address}"]
    if command is not None:
        argv += ["--", command]
    return argv

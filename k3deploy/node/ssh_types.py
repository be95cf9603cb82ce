"""What a command on a node is and gives back, and where a node is: the transport's types
(node/transport.py, the one module that knows Paramiko), for the layers above it."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import TypedDict


class ConnectionStats(TypedDict):
    """What a run cost one node (NodeConnection.stats), logged as run.ssh."""
    logins: int
    round_trips: int
    programs: list[str]


@dataclass(frozen=True)
class Result:
    command: str
    exit_code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def output(self) -> str:
        return (self.stdout + ("\n" if self.stdout and self.stderr else "") + self.stderr).strip()


@dataclass(frozen=True)
class Endpoint:
    """Where and how to reach one node; built from the inventory by `endpoint_for`."""

    name: str
    host: str
    user: str | None
    port: int | None
    key: str | None
    known_hosts: str
    connect_timeout: float
    command_timeout: float
    use_ssh_config: bool = True


def known_hosts_name(host: str, port: int | None) -> str:
    """How known_hosts names an SSH endpoint, as OpenSSH writes and looks it up: the plain
    host on port 22, `[host]:port` on any other (openssh-portable misc.c put_host_port; sshd(8)
    "SSH_KNOWN_HOSTS FILE FORMAT": "A hostname or address may optionally be enclosed within
    `[' and `]' brackets then followed by `:' and a non-standard port number"). Paramiko's
    SSHClient.connect names the server key the same way (paramiko 4.0 client.py,
    server_hostkey_name), so nodes behind one gateway, one port each, have a line each."""
    port = port or 22
    return host if port == 22 else f"[{host}]:{port}"


def program_of(command: str) -> str:
    """The program a remote command runs, for the run's count of round trips per program:
    `sh -s` is a script on stdin (the batched look)."""
    words = command.split()
    skip = {"sudo", "-n", "--", "sh", "-c", "-s"}
    return next((w.strip("'\"") for w in words if w not in skip),
                "sh -s (script on stdin)" if "-s" in words else command)[:40]


def quote(argv: list[str] | str) -> str:
    return argv if isinstance(argv, str) else shlex.join([str(a) for a in argv])

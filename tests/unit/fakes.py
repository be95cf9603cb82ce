"""In-memory stand-ins for a session and its connections: the runner and steps run against
them without any I/O."""

from __future__ import annotations

from pathlib import Path

from k3deploy.core.errors import CommandError, UnreachableError
from k3deploy.node.facts import MARK
from k3deploy.core.state import NodeState
from k3deploy.node.transport import Result, quote


class FakeConn:
    def __init__(self, name: str, *, unreachable: bool = False, boot_id: str = "boot-1"):
        self.name = name
        self.unreachable = unreachable
        self.boot_id = boot_id
        self.commands: list[str] = []
        self.uploads: dict[str, str] = {}
        self.ep = type("Ep", (), {"user": "root", "name": name})()

    def open(self):
        if self.unreachable:
            raise UnreachableError(self.name, "cannot reach it", hint="is it up?")

    def close(self):
        pass

    def run(self, argv, *, sudo=False, stdin=None, timeout=None, check=True, retry=False,
            step=None):
        self.open()
        command = quote(argv)
        self.commands.append(command)
        if "machine-id" in command:
            out = (f"{MARK}begin machine_id\nm-{self.name}\n{MARK}end 0\n"
                   f"{MARK}begin boot_id\n{self.boot_id}\n{MARK}end 0\n")
            return Result(command, 0, out, "")
        code, out = self.respond(command)
        if check and code:
            raise CommandError(self.name, command, code, out, step=step)
        return Result(command, code, out, "")

    def respond(self, command: str) -> tuple[int, str]:
        return 0, ""

    def put_text(self, content, path, *, mode=0o600, sudo=False, step=None):
        self.open()
        self.uploads[path] = content


class FakeSession:
    def __init__(self, inv, tmp: Path, conns: dict[str, FakeConn] | None = None):
        self.inv = inv
        self.state_dir = tmp / "state" / inv.cluster
        self.connections = conns or {n.name: FakeConn(n.name) for n in inv.nodes}
        self.states = {n.name: NodeState(self.state_dir, n.name) for n in inv.nodes}

    def conn(self, name):
        return self.connections[name]

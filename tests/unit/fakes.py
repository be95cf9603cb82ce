"""In-memory stand-ins for a session and its connections: the runner and steps run against
them without any I/O."""

from __future__ import annotations

import re
from pathlib import Path

from k3deploy.core.errors import CommandError, UnreachableError
from k3deploy.node.facts import MARK
from k3deploy.core.state import NodeState
from k3deploy.node.ssh_types import Result, quote


def section(command: str, short: str, body: str, code: int = 0) -> str:
    """A fact's answer, under the name the batch asked for it by (`<step label>.<fact>`)."""
    found = re.search(rf"{MARK}begin (\S*\b{re.escape(short)});", command)
    return f"{MARK}begin {found.group(1) if found else short}\n{body}\n{MARK}end {code}\n"


class FakeConn:
    def __init__(self, name: str, *, unreachable: bool = False, boot_id: str = "boot-1"):
        self.name = name
        self.unreachable = unreachable
        self.boot_id = boot_id
        self.commands: list[str] = []
        self.uploads: dict[str, str] = {}
        self.upload_batches: list[list[str]] = []   # put_texts: one round trip each
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
        if command == "sh -s" and stdin:   # a batch of facts: what it asks is its script
            command = stdin
        self.commands.append(command)
        code, out = self.respond(command)
        if "machine-id" in command:   # the run's first look: identity plus the steps' facts
            named = dict(re.findall(rf"{MARK}begin (\S*(machine_id|boot_id));", command))
            values = {"machine_id": f"m-{self.name}", "boot_id": self.boot_id}
            out += "".join(f"{MARK}begin {name}\n{values[kind]}\n{MARK}end 0\n"
                           for name, kind in named.items())
        if check and code:
            raise CommandError(self.name, command, code, out, step=step)
        return Result(command, code, out, "")

    def respond(self, command: str) -> tuple[int, str]:
        return 0, ""

    def put_text(self, content, path, *, mode=0o600, sudo=False, step=None):
        self.open()
        self.uploads[path] = content

    def put_texts(self, files, *, sudo=False, step=None):
        self.open()
        self.upload_batches.append([path for _, path, _ in files])
        for content, path, _ in files:
            self.uploads[path] = content


class FakeSession:
    def __init__(self, inv, tmp: Path, conns: dict[str, FakeConn] | None = None):
        self.inv = inv
        self.state_dir = tmp / "state" / inv.cluster
        self.connections = conns or {n.name: FakeConn(n.name) for n in inv.nodes}
        self.states = {n.name: NodeState(self.state_dir, n.name) for n in inv.nodes}

    def conn(self, name):
        return self.connections[name]

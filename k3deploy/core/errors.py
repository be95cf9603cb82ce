"""The error tree. Every expected failure is a K3Error; the CLI prints it in a few lines.

Anything that is not a K3Error is a bug and keeps its traceback.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_STEP_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_PARTIAL = 3


class K3Error(Exception):
    """Base of every error k3deploy expects and explains."""

    exit_code = EXIT_STEP_FAILED
    hint: str | None = None

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        if hint is not None:
            self.hint = hint

    def lines(self) -> list[str]:
        out = [str(self)]
        if self.hint:
            out.append(f"fix: {self.hint}")
        return out


class BadInputError(K3Error):
    """The inventory, playbook or arguments are wrong; nothing was touched."""

    exit_code = EXIT_BAD_INPUT


class InventoryError(BadInputError):
    def __init__(self, path: str, problems: list[str]):
        self.path = path
        self.problems = problems
        super().__init__(f"{path}: {len(problems)} problem(s) in the inventory")

    def lines(self) -> list[str]:
        return [str(self)] + [f"  - {p}" for p in self.problems]


class FleetNotSupported(BadInputError):
    """A fleet inventory (groups: and a router) given to a command that runs one group."""

    def __init__(self, path: str, groups: object):
        self.path = path
        names = [str(g.get("name")) for g in groups if isinstance(g, dict)] \
            if isinstance(groups, list) else []
        super().__init__(
            f"{path} describes a fleet ({len(names)} groups: {', '.join(names) or '-'}, "
            "behind one router); `run` runs a playbook on one group (an inventory with "
            "nodes: at the top level)",
            hint=f"`k3deploy check -i {path}` validates a fleet and lists its groups; `up`, "
                 "`status`, `verify`, `watch`, `roll`, `logs` and `down` run a fleet, `chat` "
                 "and `bench` go through its router; to run a playbook on one group, write "
                 "that group's own inventory")


class PlaybookError(BadInputError):
    pass


class LockError(K3Error):
    """Another k3deploy run holds the cluster lock."""

    exit_code = EXIT_BAD_INPUT


class NodeError(K3Error):
    """Something failed on one node; carries the node (and step when known)."""

    def __init__(self, node: str, message: str, *, step: str | None = None, hint: str | None = None):
        self.node = node
        self.step = step
        super().__init__(message, hint=hint)

    def where(self) -> str:
        return f"{self.node}/{self.step}" if self.step else self.node

    def lines(self) -> list[str]:
        out = [f"[{self.where()}] {self}"]
        if self.hint:
            out.append(f"  fix: {self.hint}")
        return out


class UnreachableError(NodeError):
    """The node cannot be reached over SSH (after bounded retries)."""


class HostKeyError(NodeError):
    """The node's host key is unknown or changed; we never connect blindly."""


class CommandError(NodeError):
    """A command on a node exited non-zero."""

    def __init__(self, node: str, command: str, exit_code: int, output: str, *,
                 step: str | None = None, hint: str | None = None):
        self.command = command
        self.output = output
        super().__init__(node, f"command exited {exit_code}: {command}", step=step, hint=hint)

    def tail(self, lines: int = 8) -> list[str]:
        return self.output.rstrip().splitlines()[-lines:]

    def lines(self) -> list[str]:
        out = super().lines()
        out += [f"  | {line}" for line in self.tail()]
        return out


class StepFailed(NodeError):
    """A step ran but the node is not in the state the step promises."""


class DiskError(StepFailed):
    """A node's disk refused a write (full, over quota, read-only, failing): no retry or restart
    changes that; the fix is room on that node."""


class EngineImageError(StepFailed):
    """The engine image cannot run the model (its engine refused the model's parser): the fix
    is another image, not another flag."""


class EndpointError(K3Error):
    """The serving endpoint could not be reached or refused a request (chat, bench)."""


class Interrupted(K3Error):
    """Ctrl-C (SIGINT) or SIGTERM: the run stopped; exit 128 + the signal's number, as a shell
    reports a process the signal ended."""

    def __init__(self, signum: int, details: list[str] | None = None):
        import signal
        self.signum = signum
        self.exit_code = 128 + signum
        self.details = details or []
        super().__init__(f"interrupted by {signal.Signals(signum).name}")

    def lines(self) -> list[str]:
        return [str(self)] + self.details

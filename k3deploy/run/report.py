"""What a run found: each node's result of each step, the problems found, the exit code."""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field

from k3deploy.core.errors import EXIT_OK, EXIT_PARTIAL, EXIT_STEP_FAILED
from k3deploy.core.status import NOT_THROUGH, Status


@dataclass
class StepResult:
    status: Status
    actions: list[str] = field(default_factory=list)
    error: list[str] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class RunReport:
    steps: list[str] = field(default_factory=list)
    results: dict[str, dict[str, StepResult]] = field(default_factory=dict)
    problems: list[tuple[str, str, str]] = field(default_factory=list)
    # Exit 3 ("partial") only where the goal is per-node work (down, logs, check): a bring-up
    # that lost a node did not reach its goal, which is exit 1.
    partial_ok: bool = True

    def set(self, node: str, step: str, result: StepResult) -> None:
        self.results.setdefault(node, {})[step] = result

    def ordered(self, names: list[str]) -> None:
        """Keep rows in rank order, not in the order threads happened to finish."""
        self.results = {n: self.results.get(n, {}) for n in names} | self.results

    def statuses(self) -> builtins.set[Status]:  # builtins: `set` here is the method above
        return {r.status for per in self.results.values() for r in per.values()}

    def exit_code(self) -> int:
        seen = self.statuses()
        # In per-node work a problem row of a node that could not be reached ("could not be
        # checked") restates the unreachable status: partial, not a failure.
        gone = set(self.unreachable_nodes()) if self.partial_ok else set()
        if [p for p in self.problems if p[0] not in gone] or seen & {Status.FAILED, Status.BLOCKED}:
            return EXIT_STEP_FAILED
        if Status.UNREACHABLE in seen:
            return EXIT_PARTIAL if self.partial_ok else EXIT_STEP_FAILED
        return EXIT_OK

    def unreachable_nodes(self) -> list[str]:
        return [n for n, per in self.results.items()
                if any(r.status == Status.UNREACHABLE for r in per.values())]

    def failed_nodes(self) -> builtins.set[str]:
        return {n for n, per in self.results.items()
                if any(r.status in NOT_THROUGH for r in per.values())}

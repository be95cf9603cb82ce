"""A step's status on one node: what the runner reports, the state files record and `status`
shows. A StrEnum, so state files and --json keep the same strings ("ok", "would-change").
"""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    OK = "ok"                      # looked: nothing to do
    CHANGED = "changed"            # did what was missing
    WOULD_CHANGE = "would-change"  # --check: would do something
    FAILED = "failed"
    UNREACHABLE = "unreachable"    # the node did not answer over SSH
    BLOCKED = "blocked"            # not run: it needs every node and one failed earlier
    INTERRUPTED = "interrupted"    # Ctrl-C / SIGTERM during the step
    RUNNING = "running"            # state file: begun, not finished (a run holds it, or died)
    NEVER = "never"                # state file: no run reached the step on this node
    STALE = "stale"                # status: the node is another machine than the record's
    TORN_DOWN = "torn down"        # status: an engine step a later teardown undid


# The step reached its goal on the node, or (--check) would: the next step may follow.
SETTLED = frozenset({Status.OK, Status.CHANGED, Status.WOULD_CHANGE})
# The step's work is done on the node itself (not only planned).
APPLIED = frozenset({Status.OK, Status.CHANGED})
# The node did not get through the step.
NOT_THROUGH = frozenset({Status.FAILED, Status.UNREACHABLE, Status.BLOCKED})

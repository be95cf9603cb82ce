"""When a node's downloader that died of the Hub's bad minutes is started again in the same run,
and how long a shared volume's followers wait for the head's restart of one.

A downloader gives up on a file only after download.retry_minutes without a new byte; when that
alone ended it (5xx, 429 or timeouts: its progress says `transient`), the node's own download
wait starts it again, MAX_HUB_RESTARTS times per run. The followers of a shared HF cache see
the head's downloader dead before that restart (the head's wait restarts it within a poll or
two): they wait HEAD_RESTART_GRACE seconds per death before they fail naming the head.
"""

from __future__ import annotations

import time

from k3deploy.facts.download import WeightsStatus
from k3deploy.node.context import RunContext

MAX_HUB_RESTARTS = 3
HEAD_RESTART_GRACE = 60.0
START = "start-downloader"   # the start action's tag: the run's ledger counts them per node


def starts(run: RunContext, name: str) -> int:
    """How many times this run started the node's downloader (each returned)."""
    return run.ledger.count(name, START)


def restarts(run: RunContext, name: str) -> int:
    """Starts after this run's first: each a restart after the Hub's errors."""
    return max(0, starts(run, name) - 1)


def restartable(status: WeightsStatus, name: str, run: RunContext) -> bool:
    """The node's downloader died of the Hub alone and was restarted fewer than
    MAX_HUB_RESTARTS times in this run."""
    return status.progress is not None and status.progress.transient and \
        restarts(run, name) < MAX_HUB_RESTARTS


class HeadRestartGrace:
    """One grace per death of the head's downloader (its restart count names the death), timed
    from when a follower first saw it dead."""

    def __init__(self) -> None:
        self.dead_since: dict[tuple[str, int], float] = {}

    def waiting(self, status: WeightsStatus, run: RunContext) -> bool:
        """True while the followers should keep waiting for the head's restart."""
        head = run.inv.head.name
        if not restartable(status, head, run):
            return False
        death = (head, restarts(run, head))
        seen = self.dead_since.setdefault(death, time.monotonic())
        return time.monotonic() - seen <= HEAD_RESTART_GRACE

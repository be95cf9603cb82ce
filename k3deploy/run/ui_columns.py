"""A progress column for the download: when the weights will be ready, on the wall clock
(a 30-minute ETA read at a glance is "ready ~14:35 CEST", not arithmetic)."""

from __future__ import annotations

import time

from rich.progress import ProgressColumn, Task
from rich.text import Text


def ready_at(remaining_s: float | None, now: float) -> str:
    if remaining_s is None:
        return "ready ~?"
    when = time.localtime(now + remaining_s)
    fmt = "%H:%M %Z" if remaining_s < 20 * 3600 else "%a %H:%M %Z"
    return "ready ~" + time.strftime(fmt, when)


class ReadyAtColumn(ProgressColumn):
    max_refresh = 1.0

    def render(self, task: Task) -> Text:
        if task.finished:
            return Text("ready", style="progress.remaining")
        return Text(ready_at(task.time_remaining, time.time()), style="progress.remaining")

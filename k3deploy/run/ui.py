"""What the person at the laptop sees: one line per node and step, progress, a summary."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from k3deploy.core.redact import redact
from k3deploy.core import units
from k3deploy.core.status import Status
from k3deploy.facts.download import Progress
from k3deploy.run.report import RunReport

if TYPE_CHECKING:
    from rich.progress import Progress as Bars, TaskID  # rich.progress is imported at the first bar

STYLE: dict[str, str] = {Status.OK: "green", Status.CHANGED: "yellow", Status.WOULD_CHANGE: "cyan",
         Status.FAILED: "bold red", Status.UNREACHABLE: "magenta", Status.BLOCKED: "red",
         Status.INTERRUPTED: "bold magenta"}


def _console() -> Console:
    # Not a terminal (CI, a pipe): rich would assume 80 columns and squash the tables.
    probe = Console(stderr=True)
    return Console(stderr=True, highlight=False,
                   width=None if probe.is_terminal else max(probe.width, 140))


class Ui:
    def __init__(self, console: Console | None = None, quiet: bool = False):
        self.console = console or _console()
        self.quiet = quiet
        self._lock = threading.Lock()
        self._progress: Bars | None = None
        self._tasks: dict[str, TaskID] = {}

    def say(self, text: str, wrap: bool = True) -> None:
        # wrap=False: a path or command stays on one line in a pipe (rich wraps at the width).
        with self._lock:
            self.console.print(redact(text), markup=False, highlight=False, soft_wrap=not wrap)

    def step_result(self, node: str, step: str | None, status: str, error: list[str],
                    actions: list[str]) -> None:
        where = f"{node}/{step}" if step else node
        with self._lock:
            self.console.print(f"[{STYLE.get(status, '')}]{status:>12}[/] {where}")
            for line in (actions if status == Status.WOULD_CHANGE else []):
                self.console.print(f"{'':>14}would: {redact(line)}", markup=False)
            for line in error:
                self.console.print(f"{'':>14}{redact(line)}", markup=False)

    def summary(self, report: RunReport) -> None:
        self.stop_progress()
        table = Table(title="k3deploy run", show_lines=False)
        table.add_column("node")
        for step in report.steps:
            table.add_column(step)
        for node, per in report.results.items():
            cells = [f"[{STYLE.get(per[s].status, '')}]{per[s].status}[/]" if s in per else "-"
                     for s in report.steps]
            table.add_row(node, *cells)
        with self._lock:
            self.console.print(table)

    def problems(self, problems: list[tuple[str, str, str]], changed: bool = False) -> None:
        # After launch (verify's problems) "nothing was changed" would be false comfort.
        title = f"{len(problems)} problem(s) found" + ("" if changed else "; nothing was changed")
        table = Table(title=title)
        for column in ("node", "check", "problem"):
            table.add_column(column, overflow="fold")
        for node, check, message in problems:
            table.add_row(node, check, redact(message))
        with self._lock:
            self.console.print(table)

    # -- download progress ---------------------------------------------------------------
    def download(self, node: str, progress: Progress) -> None:
        if self.quiet:
            return
        with self._lock:
            bar = self._bar()
            task = self._tasks.get(node)
            if task is None:
                task = self._tasks[node] = bar.add_task(node, total=progress.bytes_total or 1,
                                                        shards="")
            shards = f"{progress.shards_done}/{progress.shards_total} shards"
            if progress.peer_bytes:  # fan-out: where this node's bytes came from
                shards += (f", hub {units.size(progress.hub_bytes)}, peers "
                           f"{units.size(progress.peer_bytes)}")
            bar.update(task, completed=progress.bytes_done, total=progress.bytes_total or 1,
                       shards=shards)

    def _bar(self) -> Bars:
        if self._progress is None:
            from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn,
                                       TimeRemainingColumn, TransferSpeedColumn)
            from k3deploy.run.ui_columns import ReadyAtColumn
            self._tasks = {}
            self._progress = Progress(TextColumn("{task.description:>10}"), BarColumn(),
                                      DownloadColumn(), TransferSpeedColumn(),
                                      TimeRemainingColumn(), ReadyAtColumn(),
                                      TextColumn("{task.fields[shards]}"),
                                      console=self.console, transient=False)
            self._progress.start()
        return self._progress

    def stop_progress(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

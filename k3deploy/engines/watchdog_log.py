"""SGLang's scheduler watchdog in an engine's log: a forward step that made no progress for
`--watchdog-timeout` seconds, and the batch it held. Pure.

The lines, as SGLang writes them (0.5.16 wheel: srt/utils/watchdog.py WatchdogRaw,
srt/managers/scheduler_components/invariant_checker.py create_scheduler_watchdog; older
releases wrote `Watchdog timeout (self.watchdog_timeout=300)` and the batch as
`self.cur_batch.batch_size()=N`, sgl-project/sglang#3752, #7553), each under the scheduler's
`[date time TPn]` prefix:

    [2026-08-04 11:58:42 TP1] Scheduler debug info:
    scheduler.cur_batch_for_debug.batch_size()=1
    [2026-05-26 13:36:14 TP5] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)
    [2026-05-26 13:36:19] SIGQUIT received. signum=None, frame=None. It usually means one child failed.

Transcripts: tests/fixtures/real/sglang/0.5.16/watchdog-debug-info.txt,
tests/fixtures/real/sglang/main-2026-05/watchdog-timeout.txt.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TIMEOUT = re.compile(r"(?:\[[^\]]*?\b(?P<rank>TP\d+)\]\s*)?(?:Scheduler watchdog|Watchdog) "
                      r"timeout \(self\.watchdog_timeout=(?P<s>[\d.]+)"
                      r"(?:, self\.soft=(?P<soft>True|False))?\)")
_BATCH = re.compile(r"(?:scheduler\.cur_batch_for_debug|self\.cur_batch)\.batch_size\(\)="
                    r"(?P<n>\d+)")


@dataclass(frozen=True)
class WatchdogTimeout:
    seconds: float            # the watchdog's timeout the step outlived
    soft: bool                # a soft watchdog only dumps; the hard one ends the server
    rank: str | None          # "TP5", when the line carries the scheduler's prefix
    batch_size: int | None    # the batch the scheduler held, from its debug info

    def line(self) -> str:
        where = f"{self.rank}'s " if self.rank else ""
        batch = f" with a batch of {self.batch_size} requests" if self.batch_size else ""
        return (f"{where}scheduler made no forward progress for {self.seconds:g} s{batch} "
                "(SGLang: `Scheduler watchdog timeout`)")


def watchdog_timeout(log: str) -> WatchdogTimeout | None:
    """The first hard watchdog timeout in the log (a soft one, when that is all there is),
    with the batch size of the debug info before it."""
    found = None
    batch = None
    for line in log.splitlines():
        size = _BATCH.search(line)
        if size:
            batch = int(size["n"])
            continue
        hit = _TIMEOUT.search(line)
        if hit:
            soft = hit["soft"] == "True"
            current = WatchdogTimeout(float(hit["s"]), soft, hit["rank"], batch)
            if not soft:
                return current
            found = found or current
    return found

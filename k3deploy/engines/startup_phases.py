"""How long an engine's start-up phases took, from the time stamps of its own log lines. Pure.

SGLang stamps every logger line "[%Y-%m-%d %H:%M:%S] " (its scheduler processes add the rank:
"[... TP0] "), to the second (tests/fixtures/real/sglang/0.5.16/). The phases are spans
between the lines model_runner.py and http_server.py log: torch distributed init ("Init torch
distributed begin." -> "ends."), the weights ("Load weight begin." -> "Load weight end."),
the KV pool ("Load weight end." -> "Memory pool end."), and the whole start-up to the ready
line ("The server is fired up and ready to roll!", the head only).
"""

from __future__ import annotations

import datetime
import re

_STAMPED = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?: [^\]]*)?\] (.*)$")
BEGIN = "Init torch distributed begin."
PHASES = (("distributed_init", BEGIN, "Init torch distributed ends."),
          ("weights", "Load weight begin.", "Load weight end."),
          ("kv_pool", "Load weight end.", "Memory pool end."),
          ("to_ready", BEGIN, "The server is fired up and ready to roll!"))
# The lines phases() reads, as one ERE (grep -E, awk) with no backslash: awk -v would eat it.
LOG_PATTERN = "|".join(sorted({line.replace(".", "[.]") for _, begin, end in PHASES
                                for line in (begin, end)}))


def stamps(text: str) -> list[tuple[datetime.datetime, str]]:
    """(time, message) of every stamped line, in order."""
    found = []
    for line in text.splitlines():
        match = _STAMPED.match(line.strip())
        if match:
            found.append((datetime.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S"),
                          match.group(2)))
    return found


def phases(text: str) -> dict[str, float]:
    """Seconds per phase whose first and last line are both in the log (the first start
    line, the last end line: a relaunch in the same log counts from its own start)."""
    lines = stamps(text)
    out = {}
    for name, begin, end in PHASES:
        starts = [t for t, msg in lines if msg.startswith(begin)]
        ends = [t for t, msg in lines if msg.startswith(end)]
        if starts and ends:
            start = max((t for t in starts if t <= ends[-1]), default=None)
            if start is not None:
                out[name] = (ends[-1] - start).total_seconds()
    return out

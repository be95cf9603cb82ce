"""The part of a node program's output that says why it failed, for an error message.

A Python program that dies prints a traceback whose last line alone ("JSONDecodeError: ...")
names neither the file nor the call that failed; the frames above it do. So a traceback is kept
whole up to a bound (its header and its last frames), and other output by its last lines.
"""

from __future__ import annotations

TRACEBACK = "Traceback (most recent call last):"
MAX_LINES = 24


def failure_tail(output: str, max_lines: int = MAX_LINES) -> list[str]:
    """The last traceback (header, then its last max_lines - 1 lines), else the last lines
    that mention an error, else the last 5 lines."""
    lines = output.rstrip().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(TRACEBACK)]
    if starts:
        body = lines[starts[-1] + 1:]
        return [lines[starts[-1]], *body[-(max_lines - 1):]]
    errors = [line for line in lines if "error" in line.lower()]
    return errors[-3:] or lines[-5:]

"""wait_until: how a test waits for a condition, instead of sleeping a guess at how long it takes."""
from __future__ import annotations

import time


def wait_until(predicate, timeout: float, what: str, interval: float = 0.1):
    """Poll predicate() until it is truthy and return that value; after `timeout` seconds fail
    naming `what` (and the last value seen, when it says more than False)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            last = "" if value in (None, False) else f" (last: {value!r})"
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}{last}")
        time.sleep(interval)

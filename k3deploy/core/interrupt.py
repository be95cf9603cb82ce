"""Ctrl-C and SIGTERM end a run within seconds.

The signal handler only sets one event; every poll loop waits on it instead of sleeping
(`sleep`), and remote commands check it while they read (transport), so worker threads stop
by themselves and the runner records `interrupted`. A thread that still hangs (a connect to a
silent node) does not hold the exit: after GRACE_SECONDS the process exits anyway, after the
registered finalizers (state files) ran.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import FrameType

from k3deploy.core.errors import Interrupted

GRACE_SECONDS = 4.0
SIGNALS = (signal.SIGINT, signal.SIGTERM)

_stop = threading.Event()


@dataclass
class _Run:
    """What the handlers of the run in progress share."""
    signum: int | None = None
    finalizers: list[Callable[[], None]] = field(default_factory=list)
    timer: threading.Timer | None = None
    exit: Callable[[int], None] | None = None


_current = _Run()


def exit_process(code: int) -> None:
    """Ends the process at once, threads and all: the forced exit's and watch's default.
    tests/conftest.py replaces it, so no test can end the pytest run."""
    os._exit(code)


def requested() -> bool:
    return _stop.is_set()


def signum() -> int | None:
    return _current.signum


def check() -> None:
    """Raise Interrupted when a stop was requested."""
    if _stop.is_set():
        raise Interrupted(_current.signum or signal.SIGINT)


def sleep(seconds: float) -> None:
    """time.sleep that a stop request ends at once (raising Interrupted)."""
    if _stop.wait(seconds):
        check()


def at_forced_exit(finalizer: Callable[[], None]) -> None:
    _current.finalizers.append(finalizer)


def _handler(num: int, _frame: FrameType | None) -> None:
    if _stop.is_set():  # a second Ctrl-C: the user does not want to wait for the grace period
        _force_exit()
    _current.signum = num
    _stop.set()
    timer = threading.Timer(GRACE_SECONDS, _force_exit)
    timer.daemon = True
    _current.timer = timer
    timer.start()


def _force_exit() -> None:
    for finalizer in _current.finalizers:
        try:
            finalizer()
        except Exception:  # exiting anyway; one failing finalizer must not keep the others
            pass
    num = _current.signum or signal.SIGINT
    os.write(2, f"interrupted by {signal.Signals(num).name}; a node command did not stop within "
                f"{GRACE_SECONDS:.0f}s, exiting without it\n".encode())
    (_current.exit or exit_process)(128 + num)


@contextlib.contextmanager
def handling(force_exit: Callable[[int], None] | None = None) -> Iterator[None]:
    """Install the handlers for the duration of a run (main thread only; elsewhere, as in a
    test's worker thread, signals stay as they are). force_exit: what the forced exit calls with the
    exit code instead of exit_process (a test passes its own)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _current.exit = force_exit
    old = {s: signal.getsignal(s) for s in SIGNALS}
    for s in SIGNALS:
        signal.signal(s, _handler)
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        if _current.timer:
            _current.timer.cancel()
        _stop.clear()
        _current.signum, _current.finalizers, _current.timer, _current.exit = None, [], None, None

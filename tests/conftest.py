"""Fixtures every test gets.

- No test can end the pytest process: interrupt.exit_process (os._exit, what the 4 s grace
  timer and watch call) is replaced by one that records the code and raises SystemExit in the
  calling thread; a test that reached it unasked fails.
- The redaction registry (core/redact.py) is process-wide: each test starts with an empty one,
  so a secret one test registered cannot make another's output pass or fail.
- structlog's configuration is process-wide too: the CLI's global options point it at the
  stderr of the test that ran them, which pytest closes afterwards; every test ends with the
  defaults back, so a later test's log line is not written to a closed file (it was, when a
  CLI test and a runner test shared a worker).
"""

from __future__ import annotations

import pytest
import structlog

from k3deploy.core import interrupt, redact


@pytest.fixture(autouse=True)
def process_exits(monkeypatch):
    """The exit codes k3deploy tried to end the process with, in this test."""
    calls: list[int] = []

    def refuse(code: int) -> None:
        calls.append(code)
        raise SystemExit(code)
    monkeypatch.setattr(interrupt, "exit_process", refuse)
    yield calls
    assert not calls, f"the test reached a process exit (code {calls[0]}) it did not replace"


@pytest.fixture(autouse=True)
def fresh_redaction_registry(monkeypatch):
    monkeypatch.setattr(redact, "_known", set())


@pytest.fixture(autouse=True)
def structlog_defaults():
    yield
    structlog.reset_defaults()

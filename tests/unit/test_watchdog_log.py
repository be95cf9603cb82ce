"""SGLang's scheduler watchdog lines in an engine log (engines/watchdog_log.py), from real
transcripts."""
from __future__ import annotations

from realfix import real

from k3deploy.engines.watchdog_log import WatchdogTimeout, watchdog_timeout


def test_the_watchdog_line_names_the_rank_and_the_timeout():
    found = watchdog_timeout(real("sglang/main-2026-05/watchdog-timeout.txt"))
    assert found == WatchdogTimeout(300.0, False, "TP5", None)
    assert "TP5's scheduler made no forward progress for 300 s" in found.line()


def test_the_debug_info_gives_the_batch_the_step_held():
    debug = real("sglang/0.5.16/watchdog-debug-info.txt")
    assert watchdog_timeout(debug) is None     # a dump alone is not the timeout
    tail = real("sglang/main-2026-05/watchdog-timeout.txt")
    found = watchdog_timeout(debug + tail)
    assert found is not None and found.batch_size == 1 and found.rank == "TP5"
    assert "with a batch of 1 requests" in found.line()


def test_the_old_form_and_a_soft_watchdog():
    # sgl-project/sglang#3752 (SGLang of 2025-03), as posted
    old = "[2025-03-09 00:57:15 TP4] Watchdog timeout (self.watchdog_timeout=300)\n"
    assert watchdog_timeout(old) == WatchdogTimeout(300.0, False, "TP4", None)
    soft = ("[x TP0] Scheduler watchdog timeout (self.watchdog_timeout=60.0, self.soft=True)\n")
    assert watchdog_timeout(soft).soft is True
    assert watchdog_timeout(soft + old).soft is False   # the hard one ends the server
    assert watchdog_timeout("Load weight end.\n") is None

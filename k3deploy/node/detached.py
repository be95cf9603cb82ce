"""The node-side shell for a program that outlives k3deploy's SSH session (the downloader, the
peer server, the guard): start it detached and wait until it says it is up, and stop it with a
grace period. One home for both loops, which the steps' actions run with `sh -c`.

Detached: `setsid nohup` takes it out of the session's process group and ignores SIGHUP, so
the end of the SSH session does not end it; stdin from /dev/null and output appended to its
log. The wait is bounded and ends early when the program died (`kill -0` on its pid).
"""

from __future__ import annotations

import shlex

TICK = 0.1   # seconds between two looks of either loop


def start(argv: list[str], log: str, ready: str, *, tenths: int, pid_file: str | None = None,
          ready_test: str = "-s", fail_tail: int = 0) -> str:
    """Remove the old `ready` file, start argv detached, then wait up to tenths x 0.1 s until
    `test {ready_test} ready` holds. `pid_file` names the new process at once; `fail_tail`:
    when it never got ready, print that many lines of its log and exit 1."""
    ready_q, log_q = shlex.quote(ready), shlex.quote(log)
    script = (f"rm -f {ready_q}; setsid nohup {shlex.join(argv)} >> {log_q} 2>&1 < /dev/null "
              "& pid=$!; ")
    if pid_file:
        script += f"echo $pid > {shlex.quote(pid_file)}; "
    script += (f"i=0; while [ ! {ready_test} {ready_q} ] && kill -0 $pid 2>/dev/null && "
               f"[ $i -lt {tenths} ]; do sleep {TICK}; i=$((i+1)); done")
    if fail_tail:
        script += f"; test {ready_test} {ready_q} || {{ tail -n {fail_tail} {log_q}; exit 1; }}"
    return script


def stop(pids: str, *, tenths: int, signal: str = "TERM", kill_after: bool = True) -> str:
    """Send `signal` to pids (a shell word: numbers, or "$1"), wait up to tenths x 0.1 s while
    they live, then SIGKILL what is left (unless kill_after is off). Always exits 0."""
    script = (f"kill -{signal} {pids} 2>/dev/null; i=0; while kill -0 {pids} 2>/dev/null && "
              f"[ $i -lt {tenths} ]; do sleep {TICK}; i=$((i+1)); done")
    return script + (f"; kill -KILL {pids} 2>/dev/null; true" if kill_after else "; true")

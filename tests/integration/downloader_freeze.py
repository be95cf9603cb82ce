"""Stop a node's downloader at a point of its own progress, from the node itself.

A test that kills a downloader "mid-download" and waits for the moment from the laptop races
the download: the look, the laptop's kill and an SSH round trip under a loaded CI machine can
outlast the few seconds a testbed download has left. A watcher on the node stops the
downloader's processes (SIGSTOP) the moment its progress document passes the mark; whatever
the test does next finds them there, as they were then, for a SIGKILL."""

from __future__ import annotations

import shlex
import threading

WORK = "/mnt/nvme/.k3deploy"
# The character class keeps the watcher's own command line from matching its pattern.
PATTERN = "fetch_weight[s].py"

WATCH = """
import json, sys, time
deadline = time.monotonic() + {timeout}
while time.monotonic() < deadline:
    try:
        doc = json.load(open("{work}/download-progress.json"))
    except (OSError, ValueError):
        doc = {{}}
    if doc.get("state") == "running" and doc.get("bytes_done", 0) >= {fraction} * doc.get("bytes_total", 1):
        sys.exit(0)
    time.sleep(0.02)
sys.exit(3)
"""


class Freeze:
    """Started before the download: stops NODE's downloader once FRACTION of its bytes are done."""

    def __init__(self, tb, node: str, fraction: float, timeout: float = 90):
        script = WATCH.format(work=WORK, fraction=fraction, timeout=timeout)
        self.command = f"python3 -c {shlex.quote(script)} && pkill -STOP -f '{PATTERN}'"
        self.tb, self.node, self.timeout, self.result = tb, node, timeout, None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.result = self.tb.ssh(self.node, self.command, timeout=self.timeout + 30)

    def wait(self) -> None:
        """Returns once the downloader is stopped; fails naming the node if it never was."""
        self.thread.join(self.timeout + 40)
        r = self.result
        assert r is not None and r.returncode == 0, (
            f"{self.node}'s downloader was not stopped mid-way: "
            f"{r and (r.returncode, r.stdout[-500:], r.stderr[-500:])}")

    def thaw(self) -> None:
        """SIGCONT: the stopped downloader goes on from where it stood."""
        thawed = self.tb.ssh(self.node, f"pkill -CONT -f '{PATTERN}'")
        assert thawed.returncode == 0, f"{self.node}: no stopped downloader to continue"

    def kill(self) -> None:
        """SIGKILL to the stopped downloader (a stopped process takes it at once)."""
        killed = self.tb.ssh(self.node, f"pkill -9 -f '{PATTERN}'")
        assert killed.returncode == 0, f"{self.node}: no downloader left to kill"


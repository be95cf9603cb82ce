"""Node side: a download wait's look, held until the downloader is no longer running, at most
SECONDS. argv: PROGRESS_FILE PID_FILE SECONDS. Prints nothing; the status read after it in the
same batch (remote/fact_runner.py runs its programs in order) sees what ended the hold.

Why: the laptop looks once a poll. Without a hold the end of a download is seen up to a poll
plus a round trip late, on every node, and that lag is in every bring-up's weights-ready time.
Held, the look that sees the end returns within a tick of it, and a running download's looks
come no more often than before (the waiter paces looks by their start: run/waiter.py). Stdlib
only; bundled after protocol.py and weights_status.py (k3deploy.remote.bundled).
"""
import sys
import time

import protocol
import weights_status

TICK = 0.05   # seconds between looks at the progress file (a stat and a 1 kB read)


def ended(progress_path: str, pid_path: str) -> bool:
    """The downloader exited, or its progress says it ended."""
    seen = weights_status.downloader(progress_path, pid_path)
    return not seen.alive or protocol.download_ended(seen.said)


def hold(progress_path: str, pid_path: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not ended(progress_path, pid_path) and time.monotonic() < deadline:
        time.sleep(TICK)


if __name__ == "__main__":
    hold(sys.argv[1], sys.argv[2], float(sys.argv[3]))

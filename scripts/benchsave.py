"""`scripts/bench --save DIR`: the JSON documents a bench printed, kept as one file with the
machine it ran on, the command and the commit, for scripts/benchdoc to turn into tables.

Standard library only. The file is `DIR/<bench>-<UTC time>.json`:
{"bench", "command", "commit", "dirty", "started", "seconds", "machine": {...}, "runs": [...]}.
"""

import io
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path



def usable_cores() -> int:
    """The cores this process may run on (`taskset -c 0 scripts/bench ...` runs on one)."""
    return len(os.sched_getaffinity(0))

def bench_name(argv: list[str]) -> str:
    """The bench a command line selects, as scripts/bench's main() decides it."""
    for flag in ("--throughput", "--hub-faults", "--hub-cdn", "--fanout", "--guard"):
        if flag in argv:
            return flag[2:]
    return "resume" if "--resume" in argv else "bringup"


def machine(note: str) -> dict:
    """What bounds a testbed figure: the cores, their model, the load when the run began."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cores": usable_cores(), "cpu": model, "kernel": platform.release(),
            "python": platform.python_version(), "note": note}


def loadavg() -> list[float]:
    """1, 5 and 15 minute load averages, rounded."""
    return [round(x, 2) for x in os.getloadavg()]


def commit(repo: Path) -> tuple[str, bool]:
    def git(*args):
        return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True).stdout
    return git("rev-parse", "HEAD").strip(), bool(git("status", "--porcelain", "--untracked-files=no").strip())


class Tee(io.TextIOBase):
    """stdout as before, every line also kept."""

    def __init__(self, out):
        self.out, self.text = out, []

    def write(self, s):
        self.text.append(s)
        return self.out.write(s)

    def flush(self):
        self.out.flush()


def runs(text: str) -> list[dict]:
    """The JSON objects among the printed lines (a bench prints one per measurement)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def start(repo: Path) -> tuple[float, list, tuple[str, bool]]:
    """What save() needs from the bench's start: the time, the load, the commit (the code a
    bench measures is the code it started with, whatever is committed while it runs)."""
    return time.time(), loadavg(), commit(repo)


def save(directory: Path, repo: Path, argv: list[str], note: str, started: tuple, text: str) -> Path:
    """started: start(repo) when the bench began."""
    began, load, (sha, dirty) = started
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(began))
    doc = {"bench": bench_name(argv), "command": "scripts/bench " + " ".join(argv),
           "commit": sha, "dirty": dirty, "started": stamp, "seconds": round(time.time() - began),
           "machine": {**machine(note), "loadavg_at_start": load, "loadavg_at_end": loadavg()},
           "runs": runs(text)}
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{doc['bench']}-{stamp}.json"
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"bench: saved {path}", file=sys.stderr)
    return path

"""What a test of the serve-time guard looks at on a testbed node (its engine, incident,
guard processes and state), `k3deploy status`, `k3deploy watch` followed in the background, and
a request to the endpoint. For the test_guard*.py modules."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

from k3run import REPO, k3

GUARD = "/mnt/nvme/.k3deploy/guard"


def engine_running(tb, node: str) -> bool:
    res = tb.ssh(node, "docker inspect -f '{{.State.Running}}' k3")
    return res.stdout.strip() == "true"


def incident(tb, node: str) -> dict | None:
    res = tb.ssh(node, f"cat {GUARD}/incident.json")
    return json.loads(res.stdout) if res.returncode == 0 else None


def guard_pids(tb, node: str) -> list[str]:
    """The node's guard processes, as the guard step counts them: a pid whose parent is also
    a guard is a guard's subprocess between fork and exec (same command line), not a guard."""
    found = tb.ssh(node, f"for p in $(pgrep -f '^[^ ]*python[0-9.]* {GUARD}/guard[.]py( |$)'); do "
                   'echo "$p $(ps -o ppid= -p "$p")"; done').stdout
    pairs = [line.split() for line in found.splitlines() if len(line.split()) == 2]
    return [pid for pid, ppid in pairs if ppid not in {p for p, _ in pairs}]


def watching(tb, node: str) -> bool:
    """The node's one guard is past its start: its state file says it watches."""
    res = tb.ssh(node, f"cat {GUARD}/state.json")
    found = json.loads(res.stdout) if res.returncode == 0 else {}
    return found.get("phase") == "watching" and guard_pids(tb, node) == [str(found.get("pid"))]


def archived(tb, node: str) -> list[str]:
    return tb.ssh(node, f"ls {GUARD}/incidents 2>/dev/null").stdout.split()


def status(tb) -> tuple[int, dict]:
    proc = k3("status", "-i", str(tb.inventory), "--json", timeout=120)
    return proc.returncode, json.loads(proc.stdout)


def serving_again(tb) -> None:
    """The cluster serves: brought back with `up` when an earlier test left it stopped."""
    code, doc = status(tb)
    if doc["cluster"]["state"] != "serving":
        again = k3("up", "-i", str(tb.inventory))
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
        code, doc = status(tb)
    assert code == 0 and doc["cluster"]["state"] == "serving", doc["cluster"]


def all_stopped_within(tb, nodes: list[str], bound: float, since: float) -> float:
    """Seconds from `since` until no listed node's engine runs; fails past the bound."""
    left = set(nodes)
    while left and time.monotonic() - since < bound + 5:
        left = {n for n in left if engine_running(tb, n)}
        if left:
            time.sleep(0.3)
    took = time.monotonic() - since
    assert not left, f"still running after {took:.0f}s: {sorted(left)}"
    assert took <= bound, took
    return took


def set_load_seconds(tb, node: str, seconds: float) -> None:
    """The node's engine_load_seconds (read by each engine start)."""
    script = ("import json; p='/run/k3tb/node.json'; d=json.load(open(p)); "
              f"d['engine_load_seconds']={seconds}; json.dump(d, open(p, 'w'))")
    assert tb.ssh(node, ["python3", "-c", script]).returncode == 0


def chat(tb, key: str) -> int:
    body = json.dumps({"model": "moonshotai/Kimi-K3", "reasoning_effort": "low",
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    req = urllib.request.Request(f"http://{tb.address('node0')}:8000/v1/chat/completions",
                                 data=body, headers={"Content-Type": "application/json",
                                                     "Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.status


def guard_cpu_seconds(tb, node: str) -> float:
    pid = guard_pids(tb, node)[0]
    fields = tb.ssh(node, f"cat /proc/{pid}/stat").stdout.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Follow:
    """`k3deploy watch` in the background; its output lines collected as they come."""

    def __init__(self, tb, *args: str):
        self.proc = subprocess.Popen([sys.executable, "-m", "k3deploy", "watch", "-i",
                                      str(tb.inventory), "--interval", "1", *args], cwd=REPO,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def seen(self, text: str, after: int = 0) -> int | None:
        """Index of the first line from `after` on that contains text."""
        return next((i for i, ln in enumerate(self.lines) if i >= after and text in ln), None)

    def wait(self, text: str, timeout: float, after: int = 0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.seen(text, after)
            if found is not None:
                return found
            time.sleep(0.2)
        raise AssertionError(f"watch never said {text!r} in {timeout}s:\n" + "\n".join(self.lines))

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def api_key(tb) -> str:
    return next((tb.inventory.parent / ".k3deploy").glob("*/secrets/api-key")).read_text().strip()


def ask(tb, key: str, words: int, timeout: float = 60) -> int:
    body = json.dumps({"model": "moonshotai/Kimi-K3", "reasoning_effort": "low",
                       "messages": [{"role": "user", "content": " ".join(["word"] * words)}]})
    req = urllib.request.Request(f"http://{tb.address('node0')}:8000/v1/chat/completions",
                                 data=body.encode(), headers={
                                     "Content-Type": "application/json",
                                     "Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.status


def swallow(fn, *args):
    try:
        fn(*args)
    except OSError:
        pass  # the engine it waits on is stopped under it

"""scripts/bench --guard: how long the serve-time guard takes to stop every rank once one dies.
Prints, asserts nothing (tests/integration/test_guard.py holds the bounds).

Per cluster size, on a testbed brought up with `k3deploy up`:
- engine: the last rank's engine killed (`docker kill k3`): the guards learn it from that
  node's guard at once (a long poll answers on the change);
- node: after `up` restored the group, the last rank's whole node killed (the testbed's
  kill-node fault): its guard falls silent, the others wait `guard.peer_timeout` for it.
Reaction: seconds from the kill to the last surviving rank's engine stopped, from each engine's
own FinishedAt (one clock: every node runs on this machine); the bound is printed next to it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
sys.path.insert(0, str(REPO / "scripts"))
from tb.sshcmd import ssh_argv  # noqa: E402

from k3deploy.cluster import inventory  # noqa: E402

WAIT_LIMIT = 120  # seconds: a guard that never reacts shows as null, not a hang


def _sh(*argv, check=True):
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, check=False)
    if check and proc.returncode != 0:
        sys.exit(f"{' '.join(map(str, argv))} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return proc


class Cluster:
    def __init__(self, tb: Path):
        self.tb, self.inv = tb, str(tb / "inventory.yaml")
        doc = json.loads((tb / "testbed.json").read_text())["nodes"]
        self.nodes = {name: n["address"] for name, n in sorted(doc.items(), key=lambda kv: kv[1]["index"])}

    def ssh(self, node: str, command: str):
        return _sh(*ssh_argv(self.tb, "root", self.nodes[node], command), check=False)

    def engine(self, node: str) -> tuple[bool, float | None]:
        """(running, finished at as a Unix time) of the node's engine container."""
        out = self.ssh(node, "docker inspect -f '{{.State.Running}} {{.State.FinishedAt}}' k3")
        running, _, finished = out.stdout.strip().partition(" ")
        return running == "true", _unix(finished)

    def up(self) -> None:
        _sh(PY, "-m", "k3deploy", "up", "-i", self.inv)


def _unix(stamp: str) -> float | None:
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _reaction(cluster: Cluster, survivors: list[str], killed_at: float) -> float | None:
    """Seconds from the kill to the last survivor's engine stopped, or None past WAIT_LIMIT."""
    deadline = time.monotonic() + WAIT_LIMIT
    with ThreadPoolExecutor(len(survivors)) as pool:
        while time.monotonic() < deadline:
            states = list(pool.map(cluster.engine, survivors))
            if not any(running for running, _ in states):
                finished = [at for _, at in states if at]
                return round(max(finished) - killed_at, 2) if finished else None
            time.sleep(0.5)
    return None


def guard(nodes: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="k3bench-") as tmp:
        tb = Path(tmp) / "tb"
        try:
            _sh(PY, "scripts/testbed", "up", "--dir", str(tb), "--nodes", str(nodes))
            cluster = Cluster(tb)
            bound = inventory.load(cluster.inv).guard.peer_timeout
            cluster.up()
            *survivors, last = list(cluster.nodes)
            cluster.ssh(last, "docker kill k3")
            killed_at = cluster.engine(last)[1] or time.time()
            engine = _reaction(cluster, survivors, killed_at)
            cluster.up()
            killed_at = time.time()
            _sh(PY, "scripts/testbed", "fault", "--dir", str(tb), "kill-node", last)
            node = _reaction(cluster, survivors, killed_at)
        finally:
            _sh(PY, "scripts/testbed", "down", "--dir", str(tb), check=False)
    return {"nodes": nodes, "engine_killed_all_stopped_s": engine,
            "node_killed_all_stopped_s": node, "peer_timeout_s": bound}

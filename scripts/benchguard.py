"""scripts/bench --guard: how long the serve-time guard takes to stop every rank once one dies.
Prints, asserts nothing (tests/integration/test_guard.py holds the bounds).

Per cluster size, on a testbed brought up with `k3deploy up`:
- engine: the last rank's engine killed (`docker kill k3`): the guards learn it from that
  node's guard at once (a long poll answers on the change);
- node: after `up` restored the group, the last rank's whole node killed (the testbed's
  kill-node fault): its guard falls silent, the others wait `guard.peer_timeout` for it.
- wedged: the last rank's engine, then the head's, stopped with SIGSTOP (alive, its port
  accepting; the testbed's wedge-engine fault): no rank advances, the head's guard sees it after
  `guard.wedge_seconds` and every rank's engine is stopped, the wedged one's too;
- recovery: `up` after an incident, incident (the guard's record) to serving again from the
  bring-up certificate: warm (compile caches on NVMe), a replaced node (its cache from a peer),
  cold (every node's caches removed first); the stand-in compiles for --compile-seconds.
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
CACHE_ROOT = "/mnt/nvme/.k3deploy/compile-cache"


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


def _relaunch(cluster: Cluster) -> float | None:
    """`up` after an incident; the certificate's seconds from the incident to serving again."""
    cluster.up()
    found = sorted((cluster.tb / ".k3deploy").glob("*/certificates/*.json"))
    relaunch = json.loads(found[-1].read_text())["bringup"].get("relaunch") if found else None
    return (relaunch or {}).get("incident_to_serving_seconds")


def _wedge(cluster: Cluster, node: str) -> float | None:
    """Seconds from SIGSTOP of the node's engine to every rank's engine stopped (itself too)."""
    wedged_at = time.time()
    _sh(PY, "scripts/testbed", "fault", "--dir", str(cluster.tb), "wedge-engine", node)
    return _reaction(cluster, list(cluster.nodes), wedged_at)


def _deaths(cluster: Cluster, last: str) -> dict:
    survivors = [n for n in cluster.nodes if n != last]
    cluster.ssh(last, "docker kill k3")
    killed_at = cluster.engine(last)[1] or time.time()
    engine = _reaction(cluster, survivors, killed_at)
    warm = _relaunch(cluster)
    killed_at = time.time()
    _sh(PY, "scripts/testbed", "fault", "--dir", str(cluster.tb), "kill-node", last)
    node = _reaction(cluster, survivors, killed_at)
    _sh(PY, "scripts/testbed", "fault", "--dir", str(cluster.tb), "revive-node", last)
    replaced = _relaunch(cluster)  # the revived node takes the compile cache from a peer
    return {"engine_killed_all_stopped_s": engine, "node_killed_all_stopped_s": node,
            "incident_to_serving_warm_s": warm, "incident_to_serving_replaced_node_s": replaced}


def _wedges(cluster: Cluster, last: str) -> dict:
    worker = _wedge(cluster, last)
    cluster.up()
    head = _wedge(cluster, next(iter(cluster.nodes)))
    # Cold: every node's compile caches gone before the relaunch (a first bring-up's start).
    for node in cluster.nodes:
        cluster.ssh(node, f"rm -rf {CACHE_ROOT}")
    cold = _relaunch(cluster)
    return {"wedged_worker_all_stopped_s": worker, "wedged_head_all_stopped_s": head,
            "incident_to_serving_cold_s": cold}


def guard(nodes: int, wedge_seconds: float = 20, compile_seconds: float = 20) -> dict:
    with tempfile.TemporaryDirectory(prefix="k3bench-") as tmp:
        tb = Path(tmp) / "tb"
        try:
            _sh(PY, "scripts/testbed", "up", "--dir", str(tb), "--nodes", str(nodes),
                "--compile-seconds", str(compile_seconds))
            inv = tb / "inventory.yaml"
            inv.write_text(inv.read_text() + f"guard: {{enabled: true, wedge_seconds: "
                           f"{wedge_seconds}}}\n")
            cluster = Cluster(tb)
            bound = inventory.load(cluster.inv).guard.peer_timeout
            cluster.up()
            last = list(cluster.nodes)[-1]
            found = {**_deaths(cluster, last), **_wedges(cluster, last)}
        finally:
            _sh(PY, "scripts/testbed", "down", "--dir", str(tb), check=False)
    return {"nodes": nodes, **found, "peer_timeout_s": bound, "wedge_seconds": wedge_seconds,
            "compile_seconds": compile_seconds}

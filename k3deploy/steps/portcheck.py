"""Cross-node TCP reachability: every node must reach the head's dist-init port and a sample
of ephemeral ports on every other node. Temporary listeners exit by themselves."""

from __future__ import annotations

import json
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from k3deploy.errors import K3Error

SCRIPT = (Path(__file__).parent.parent / "remote" / "portcheck.py").read_text()
LISTEN_SECONDS = 20
SAMPLE = 2


def _ports_for(run, name: str, head: str, rng: random.Random) -> list[int]:
    ports = [rng.randint(33000, 60000) for _ in range(SAMPLE)]
    return ports + [run.inv.ports.dist_init] if name == head else ports


def _start(run, name: str, ports: list[int]) -> bool:
    argv = ["python3", "-c", SCRIPT, "listen", str(LISTEN_SECONDS), *map(str, ports)]
    cmd = f"( {' '.join(_q(a) for a in argv)} ) > /dev/null 2>&1 & sleep 0.3; kill -0 $! 2>/dev/null"
    return run.session.conn(name).run(["sh", "-c", cmd], check=False).ok


def _probe(run, name: str, targets: list[str]) -> dict:
    res = run.session.conn(name).run(["python3", "-c", SCRIPT, "probe", *targets], check=False)
    try:
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {}


def _q(arg: str) -> str:
    import shlex
    return shlex.quote(arg)


def reachability_problems(run, all_facts: dict) -> list[tuple[str, str, str]]:
    names = [n for n in all_facts if all_facts[n].get("hub_client") is not None]
    if len(names) < 2 or run.shared.get("skip_portcheck"):
        return []
    head = run.inv.head.name
    rng = random.Random()
    plan = {n: _ports_for(run, n, head, rng) for n in names}
    try:
        with ThreadPoolExecutor(max_workers=min(32, len(names))) as pool:
            started = dict(zip(names, pool.map(lambda n: _start(run, n, plan[n]), names)))
            probes = {n: [f"{run.inv.node(m).self_ip}:{p}" for m in names if m != n
                          for p in plan[m] if started[m]] for n in names}
            results = dict(zip(names, pool.map(lambda n: _probe(run, n, probes[n]), names)))
    except K3Error as err:
        return [(getattr(err, "node", "cluster"), "ports", str(err))]
    return _report(run, results, started)


def _report(run, results: dict, started: dict) -> list[tuple[str, str, str]]:
    out = [(n, "ports", "could not open a test listener (port in use?)")
           for n, ok in started.items() if not ok]
    for name, res in results.items():
        blocked = sorted(t for t, ok in res.items() if not ok)
        if blocked:
            out.append((name, "ports", f"cannot reach {', '.join(blocked)}: open the full TCP "
                        "range between the nodes (NCCL/Gloo hang on a partial range)"))
    return out

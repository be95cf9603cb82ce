"""Cross-node TCP reachability: every node must reach the head's dist-init port and a sample
of ephemeral ports on every other node. Temporary listeners exit by themselves."""

from __future__ import annotations

import json
import random
import shlex
from concurrent.futures import ThreadPoolExecutor

from k3deploy.core.errors import Interrupted, K3Error
from k3deploy.cluster.fanout import peers_enabled
from k3deploy.remote import script_text
from k3deploy.steps import raylayout

SCRIPT = script_text("portcheck.py")
LISTEN_SECONDS = 60  # an upper bound: the check stops them as soon as it is done
SAMPLE = 2


def _ports_for(run, name: str, head: str, rng: random.Random) -> list[int]:
    ports = [rng.randint(33000, 60000) for _ in range(SAMPLE)]
    if peers_enabled(run.inv):  # weights fan-out: every node fetches from every other
        ports.append(run.inv.ports.peer)
    if name != head:
        return ports
    # Multi-node vLLM: the workers' `ray start --address` needs the head's Ray GCS port.
    ray = [run.inv.ports.ray] if raylayout.in_use(run.inv) else []
    return ports + [run.inv.ports.dist_init] + ray


def _start(run, name: str, ports: list[int]) -> tuple[str | None, dict]:
    """Start the node's listeners; returns their pid (None when they did not start) and
    {port: "listening" | "busy"}."""
    argv = ["python3", "-c", SCRIPT, "listen", str(LISTEN_SECONDS), *map(str, ports)]
    # Wait (bounded) for the listeners to report: python3 starts slowly on a loaded node.
    cmd = (f'out=$(mktemp); {shlex.join(argv)} > "$out" 2>/dev/null & pid=$!; i=0; '
           'while [ ! -s "$out" ] && kill -0 $pid 2>/dev/null && [ $i -lt 100 ]; do '
           'sleep 0.1; i=$((i+1)); done; kill -0 $pid 2>/dev/null && echo $pid && cat "$out"; '
           'rm -f "$out"')
    res = run.session.conn(name).run(["sh", "-c", cmd], check=False)
    lines = res.stdout.split()
    try:
        return lines[0], {int(k): v for k, v in json.loads(" ".join(lines[1:])).items()}
    except (IndexError, ValueError):
        return None, {}


def _stop(run, name: str, pid: str | None) -> None:
    if pid:
        run.session.conn(name).run(["kill", pid], check=False)


def _probe(run, name: str, targets: list[str]) -> dict:
    res = run.session.conn(name).run(["python3", "-c", SCRIPT, "probe", *targets], check=False)
    try:
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {}


def reachability_problems(run, all_facts: dict) -> list[tuple[str, str, str]]:
    names = [n for n in all_facts if all_facts[n].get("hub_client") is not None]
    if len(names) < 2:
        return []
    head = run.inv.head.name
    rng = random.Random()
    plan = {n: _ports_for(run, n, head, rng) for n in names}
    try:
        with ThreadPoolExecutor(max_workers=min(32, len(names))) as pool:
            started = dict(zip(names, pool.map(lambda n: _start(run, n, plan[n]), names)))
            # A busy port has an owner (a running engine's rendezvous): nothing to learn there.
            probes = {n: [f"{run.inv.node(m).self_ip}:{p}" for m in names if m != n
                          for p, how in started[m][1].items() if how == "listening"]
                      for n in names}
            results = dict(zip(names, pool.map(lambda n: _probe(run, n, probes[n]), names)))
            list(pool.map(lambda n: _stop(run, n, started[n][0]), names))
    except Interrupted:
        raise
    except K3Error as err:
        return [(getattr(err, "node", "cluster"), "ports", str(err))]
    return _report(run, results, started)


def _report(run, results: dict, started: dict) -> list[tuple[str, str, str]]:
    out = [(n, "ports", "could not start a test listener (python3 missing?)")
           for n, (pid, _) in started.items() if not pid]
    for name, res in results.items():
        blocked = sorted(f"{t} ({why})" for t, why in res.items() if why is not True)
        if blocked:
            out.append((name, "ports", f"cannot reach {', '.join(blocked)}: open the full TCP "
                        "range between the nodes (NCCL/Gloo hang on a partial range)"))
    return out

"""`scripts/bench --fleet`: a steady client load through the fleet's router (the real SMG) during
a `k3deploy roll` on a testbed of two groups of two nodes; requests sent, failed and retried,
per group's window (the seconds the router's worker list showed that group not ready); then
the same load during a `kill-node` of one group's node (_kill).

Sent/failed/served are the client's own (scripts/fleetload.py: no client retries); retried is
the router's (SMG's smg_worker_retries_total over the roll, from its Prometheus port; SMG does
not label it by worker, so it is the roll's whole count). Needs root (it starts a testbed).
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from fleetload import Load, Sampler, retries

REPO = Path(__file__).resolve().parents[1]
MODEL = "moonshotai/Kimi-K3"


def _sh(*argv: str, timeout: float = 900) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return proc


def _secret(inv: Path, name: str) -> str:
    cluster = yaml.safe_load(inv.read_text())["cluster"]
    return (inv.parent / ".k3deploy" / cluster / "secrets" / name).read_text().strip()


def _heads(inv: Path) -> dict[str, str]:
    """group -> its worker URL, as the router registers it (its head's private address)."""
    doc = yaml.safe_load(inv.read_text())
    port = (doc.get("ports") or {}).get("serve", 8000)
    heads = {g["name"]: g["nodes"][0] for g in doc["groups"]}
    return {name: f"http://{head.get('private_address') or head['address']}:{port}"
            for name, head in heads.items()}


def roll(clients: int = 4, decode_tok_s: float = 4.0, max_tokens: int = 24) -> dict:
    """{"roll": ..., "kill": ...} on one testbed: the roll first, then a kill. The heads decode
    at decode_tok_s per stream (the stand-in's pacing), so a request of max_tokens outlasts
    SMG's 5 s drain settle and a group goes out with requests in flight."""
    with tempfile.TemporaryDirectory(prefix="k3bench-fleet-") as tmp:
        tb = Path(tmp) / "tb"
        inv = tb / "inventory.yaml"
        try:
            _sh("scripts/testbed", "up", "--dir", str(tb), "--nodes", "4", "--groups", "2",
                "--gpu", "h200", "--shard-bytes", "100000",
                *[a for n in ("node0", "node2") for a in ("--node", f"{n}:decode_tok_s={decode_tok_s}")])
            _sh("-m", "k3deploy", "up", "-i", str(inv), "--no-dry-fire")
            rolled = {**_measure(inv, clients, max_tokens), "decode_tok_s": decode_tok_s,
                      "max_tokens": max_tokens}
            return {"roll": rolled, "kill": _kill(tb, inv, clients, max_tokens)}
        finally:
            subprocess.run([sys.executable, "scripts/testbed", "down", "--dir", str(tb)],
                           cwd=REPO, capture_output=True)


def _measure(inv: Path, clients: int, max_tokens: int) -> dict:
    doc = yaml.safe_load(inv.read_text())
    router = doc.get("router") or {}
    node0 = doc["groups"][0]["nodes"][0]["address"]
    base = f"http://{node0}:{router.get('port', 30000)}"
    metrics = f"http://{node0}:{router.get('metrics_port', 29000)}"
    load = Load(base=base, key=_secret(inv, "api-key"), model=MODEL, clients=clients,
                max_tokens=max_tokens)
    sampler = Sampler(base=base, admin_key=_secret(inv, "router-admin-key"))
    retried0 = retries(metrics)
    with sampler, load:
        time.sleep(3)
        started = time.time()
        proc = subprocess.run([sys.executable, "-m", "k3deploy", "roll", "-i", str(inv)],
                              capture_output=True, text=True, cwd=REPO, timeout=900)
        ended = time.time()
        time.sleep(2)
    retried1 = retries(metrics)
    done = [r for r in load.done() if started <= r.started and r.ended <= ended + 60]
    groups = {}
    for name, url in _heads(inv).items():
        spans = [w for w in sampler.out_windows(url) if w[0] >= started - 1]
        inside = [r for r in done if any(a <= r.started <= b for a, b in spans)]
        groups[name] = {"out_s": round(sum(b - a for a, b in spans), 1), "sent": len(inside),
                        "failed": sum(1 for r in inside if r.error),
                        "streams": sum(1 for r in inside if r.stream)}
    both_out = sum(1 for s in sampler.samples if not any(v == "ready" for v in s.status.values()))
    return {"bench": "fleet-roll", "groups": 2, "nodes_per_group": 2, "clients": clients,
            "roll_exit": proc.returncode, "roll_s": round(ended - started, 1),
            "sent": len(done), "failed": sum(1 for r in done if r.error),
            "retried_by_router": None if retried0 is None or retried1 is None
            else retried1 - retried0,
            "samples": len(sampler.samples), "samples_both_out": both_out, "per_group": groups,
            "drain": [line for line in proc.stdout.splitlines() + proc.stderr.splitlines()
                      if ": drained (" in line or "in flight after" in line],
            "errors": sorted({r.error for r in done if r.error})[:5]}


def _kill(tb: Path, inv: Path, clients: int, max_tokens: int) -> dict:
    """The same load, then `testbed fault kill-node` on g1's second node (the inventory's guard
    settings: peer_timeout 20 s by default): how long until the router no longer holds g1
    ready, requests sent, failed and in flight at the kill; then the node revived and the
    fleet's `up` (what `watch --restart` runs) until both groups serve again."""
    doc = yaml.safe_load(inv.read_text())
    node0, victim = doc["groups"][0]["nodes"][0]["address"], doc["groups"][1]["nodes"][1]["name"]
    base = f"http://{node0}:{(doc.get('router') or {}).get('port', 30000)}"
    g1 = _heads(inv)[doc["groups"][1]["name"]]
    load = Load(base=base, key=_secret(inv, "api-key"), model=MODEL, clients=clients,
                max_tokens=max_tokens)
    sampler = Sampler(base=base, admin_key=_secret(inv, "router-admin-key"), every=0.5)
    with sampler, load:
        time.sleep(3)
        killed = time.time()
        _sh("scripts/testbed", "fault", "--dir", str(tb), "kill-node", victim)
        deadline = time.time() + 120
        while time.time() < deadline and not [w for w in sampler.out_windows(g1) if w[0] >= killed]:
            time.sleep(0.5)
        time.sleep(5)
    out = [w for w in sampler.out_windows(g1) if w[0] >= killed]
    done = [r for r in load.done() if r.ended >= killed]
    _sh("scripts/testbed", "fault", "--dir", str(tb), "revive-node", victim)
    began = time.time()
    _sh("-m", "k3deploy", "up", "-i", str(inv), "--no-dry-fire")
    return {"bench": "fleet-kill", "killed": victim,
            "guard_peer_timeout_s": (doc.get("guard") or {}).get("peer_timeout", 20),
            "out_of_router_after_s": round(out[0][0] - killed, 1) if out else None,
            "sent": len(done), "failed": sum(1 for r in done if r.error),
            "in_flight_at_kill": sum(1 for r in load.done() if r.started < killed < r.ended),
            "streams": sum(1 for r in done if r.stream),
            "back_serving_s": round(time.time() - began, 1),
            "errors": sorted({r.error for r in done if r.error})[:5]}

"""Laptop side of the endpoint probes: run remote/endpoint_probe.py on the head over SSH.

Probing from the head's loopback tests the engine, not the laptop's firewall path; the
inference port is usually scoped to a few addresses.
"""

from __future__ import annotations

import json
from k3deploy.remote import script_text

SCRIPT = script_text("endpoint_probe.py")


def probe(conn, inv, checks: list[str], key: str | None, step: str | None = None) -> dict:
    cfg = {"base": f"http://127.0.0.1:{inv.ports.serve}", "key": key, "model": inv.model.repo,
           "checks": checks}
    res = conn.run(["python3", "-c", SCRIPT], stdin=json.dumps(cfg), retry=True, step=step,
                   timeout=600)
    return json.loads(res.stdout.strip().splitlines()[-1])


def url(inv) -> str:
    return f"http://{inv.head.address}:{inv.ports.serve}/v1"

"""Laptop side of the endpoint probes: run remote/endpoint_probe.py on the head over SSH.

Probing from the head's loopback tests the engine, not the laptop's firewall path; the
inference port is usually scoped to a few addresses.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import replace

from k3deploy.cluster.inventory import Inventory, Node
from k3deploy.cluster.inventory_rules import ssh_port
from k3deploy.core.jsonvalue import JSON
from k3deploy.facts import http
from k3deploy.node import facts as F
from k3deploy.remote import bundled

# the checks that generate run at once, in a pool of the one pool module (remote/thread_pool.py)
SCRIPT = bundled("endpoint_probe.py", ("thread_pool.py",))


# SGLang's /health is a 1-token generation: it answers 200 after the scheduler's next step
# that sends tokens, 503 after SGLANG_HEALTH_CHECK_TIMEOUT (default 20 s; sglang 0.5.16
# python/sglang/srt/entrypoints/http_server.py health_generate). On a busy server that is late
# but healthy, so the probe outwaits the engine's own limit and hears its answer.
SGLANG_HEALTH_WAIT = 20.0
HEALTH_MARGIN = 10.0


def health_timeout(inv: Inventory) -> float:
    """The /health probe's timeout: the engine's own wait plus a margin."""
    try:
        engine_wait = float(inv.engine.env.get("SGLANG_HEALTH_CHECK_TIMEOUT", SGLANG_HEALTH_WAIT))
    except ValueError:
        engine_wait = SGLANG_HEALTH_WAIT
    return engine_wait + HEALTH_MARGIN


# How long the endpoint's checks may take when asked ahead, in an earlier step's look (the
# first look of a run, the one a no-op `up` makes). A healthy group answers its short
# generations at once (remote/endpoint_probe.py run_checks) well within this; a group stuck in
# a collective answers none (SGLang's /health waits SGLANG_HEALTH_CHECK_TIMEOUT, a chat never
# returns), and then holds up that look by this much, not by 300 s. An answer not in by then
# is no answer: the step looks again itself, without the bound (run/runner.py _decide), so the
# bound never fails a slow, healthy group.
AHEAD_WITHIN = 30.0


def _config(inv: Inventory, checks: list[str], key: str | None, within: float | None,
            extra: dict[str, JSON] | None = None) -> str:
    return json.dumps({"base": f"http://127.0.0.1:{inv.ports.serve}", "key": key,
                       "model": inv.model.repo, "checks": checks,
                       "health_timeout": health_timeout(inv), "within": within,
                       **(extra or {})})


def fact(name: str, inv: Inventory, checks: list[str], key: str | None,
         extra: dict[str, JSON] | None = None) -> F.Fact[http.Endpoint]:
    """The same probe as a fact, for a step's batch (the key in a here-document). A probe
    that printed nothing answered none of its checks. An earlier step's batch asks it bounded
    by AHEAD_WITHIN (Fact.ahead). `extra`: settings of a check (the decode batch's)."""
    def build(within: float | None) -> F.Fact[http.Endpoint]:
        return F.python(name, SCRIPT, [], lambda out, code: http.parse_endpoint(out, code)
                        or http.unanswered(checks),
                        stdin=_config(inv, checks, key, within, extra))
    return replace(build(None), ahead=build(AHEAD_WITHIN))


def healthy(found: http.Endpoint | None) -> bool:
    return found is not None and found.health is not None and found.health.ok


def answered(found: http.Endpoint | None) -> bool:
    """The server answered /health with any status (SGLang: 503 while it warms up; its port
    is closed before that, while the weights load)."""
    return found is not None and found.health is not None and found.health.status is not None


def url(inv: Inventory) -> str:
    """Behind an SSH gateway the head's address is the gateway's, which forwards SSH ports
    only: the endpoint is then at the head's private address (a laptop on that network, or a
    VPN into it, reaches it; tunnel_hint says how otherwise)."""
    head = inv.head
    return f"http://{head.self_ip if inv.behind_gateway(head) else head.address}:{inv.ports.serve}/v1"


def tunnel_hint(inv: Inventory, node: Node | None = None, port: int | None = None,
                what: str = "the head") -> str | None:
    """How a laptop outside the private network reaches an endpoint behind an SSH gateway:
    the head's engine by default, or PORT on NODE (a fleet's router)."""
    node = node or inv.head
    if not inv.behind_gateway(node):
        return None
    user = node.user or inv.ssh.user
    serve = port or inv.ports.serve
    forward = ["ssh", "-p", str(ssh_port(inv, node)), "-N", "-L", f"{serve}:127.0.0.1:{serve}",
               f"{user}@{node.address}" if user else node.address]
    return (f"{what} is behind the SSH gateway {node.address}; from outside its private "
            f"network: {shlex.join(forward)}, then http://127.0.0.1:{serve}/v1")

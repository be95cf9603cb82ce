""""The cluster serves", decided here only: every rank's engine container runs and the head
answers /health, asked from the head itself.

preflight skips the port mesh when it holds (the ranks reached each other over this network);
status and watch (cli/cluster_state.py) report "serving" only when it holds.
"""

from __future__ import annotations

from collections.abc import Iterable

from k3deploy.facts.docker import Container
from k3deploy.node import facts as F
from k3deploy.node import http_probe
from k3deploy.steps import probes

HEALTH = "serving"  # the head's fact: endpoint_probe's answer to ["health"]


def facts(inv, is_head: bool, api_key: str | None) -> list[F.Fact]:
    """What tells a serving cluster: the engine container (the launch step asks the same) and,
    on the head, /health."""
    found = [probes.engine_container(inv)]
    if is_head:
        found.append(http_probe.fact(HEALTH, inv, ["health"], api_key))
    return found


def serves(nnodes: int, running: Iterable[bool], head_health: dict | None) -> bool:
    """running: one flag per node that answered (a node that did not answer is not counted)."""
    running = list(running)
    return len(running) == nnodes and all(running) and http_probe.healthy(head_health)


def engine_running(container: Container | None) -> bool:
    """A node's engine runs, from its engine container (facts/docker.py)."""
    return bool(container and container.running)

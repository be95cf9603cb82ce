""""The cluster serves", decided here only: every rank's engine container runs and the head
answers /health, asked from the head itself.

preflight skips the port mesh when it holds (the ranks reached each other over this network);
status and watch (cli/cluster_state.py) report "serving" only when it holds. Whether a node's
real engine runs the configuration this run would launch (the dry-fire and up's fabric mesh
then leave the node alone) is decided here too.
"""

from __future__ import annotations

from collections.abc import Iterable

from k3deploy import engines
from k3deploy.engines import dry_fire
from k3deploy.cluster.inventory import Inventory
from k3deploy.facts.docker import Container
from k3deploy.facts.http import Endpoint
from k3deploy.steps.base import AnyFact
from k3deploy.node import http_probe
from k3deploy.steps import probes

HEALTH = "serving"  # the head's fact: endpoint_probe's answer to ["health"]


def facts(inv: Inventory, is_head: bool, api_key: str | None) -> list[AnyFact]:
    """What tells a serving cluster: the engine container (the launch step asks the same) and,
    on the head, /health."""
    found: list[AnyFact] = [probes.engine_container(inv)]
    if is_head:
        found.append(http_probe.fact(HEALTH, inv, ["health"], api_key))
    return found


def serves(nnodes: int, running: Iterable[bool], head_health: Endpoint | None) -> bool:
    """running: one flag per node that answered (a node that did not answer is not counted)."""
    running = list(running)
    return len(running) == nnodes and all(running) and http_probe.healthy(head_health)


def engine_running(container: Container | None) -> bool:
    """A node's real engine runs, from its engine container (facts/docker.py). A dry-fire's
    engine (dummy weights) left by an interrupted run answers /health too, but serves nothing
    a user asked for: status must not call that group serving."""
    return bool(container and container.running and not dry_fire.is_dry_fire(container))


def runs_configuration(container: Container | None, config: str) -> bool:
    """The node's real engine runs with this configuration label: the launch leaves it as it is."""
    return engine_running(container) and container is not None and \
        container.labels.get(engines.CONFIG_LABEL) == config

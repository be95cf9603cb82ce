""""The cluster serves" has one home (steps/engine/serves.py): preflight (which then skips the port
mesh) and status/watch (cli/cluster_state.py) give the same answer for the same nodes."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

from k3deploy.cli import cluster_state
from k3deploy.facts import http
from k3deploy.facts.docker import Container
from k3deploy.steps.checks import reachability
from tests.unit.docker_facts import container

NAMES = ("n0", "n1", "n2")
RUN = SimpleNamespace(inv=SimpleNamespace(head=SimpleNamespace(name="n0"),
                                          nodes=[SimpleNamespace(name=n) for n in NAMES]))


def _inspect(running: bool | None) -> Container | None:
    return None if running is None else container(running)


def _node(running: bool | None, health: int | None = None, head: bool = False):
    """What both read of a node (reachability.Found): the head's /health answering
    `health` (None: no answer)."""
    serving = http.Endpoint(health=http.Answer(health)) if head else None
    return SimpleNamespace(container=_inspect(running), serving=serving)


CASES = list(itertools.product([True, False, None], [True, False, None], [200, 503, None]))


@pytest.mark.parametrize("head, other, health", CASES)
def test_preflight_and_status_agree(head, other, health):
    facts = {"n0": _node(head, health, head=True), "n1": _node(other), "n2": _node(True)}
    lives = {n: {"reachable": True, "incident": None, "container": f.container,
                 "health": f.serving} for n, f in facts.items()}
    pre = reachability.serving(RUN, facts)
    status = cluster_state.summarize(lives)["state"] == cluster_state.SERVING
    assert pre == status == (head is True and other is True and health == 200)


def test_a_node_that_did_not_answer_is_not_serving():
    facts = {"n0": _node(True, 200, head=True), "n1": _node(True)}
    assert not reachability.serving(RUN, facts)


def test_a_dry_fire_group_left_running_is_not_serving():
    """Issue 53.1: a dry-fire's engines (dummy weights) left by an interrupted run answer
    /health; status must not call that group serving, nor preflight skip the port mesh."""
    from k3deploy.engines import dry_fire
    left = container(True, labels={dry_fire.DRY_FIRE_LABEL: "1"})
    facts = {n: SimpleNamespace(container=left, serving=None) for n in NAMES}
    facts["n0"].serving = http.Endpoint(health=http.Answer(200))
    lives = {n: {"reachable": True, "incident": None, "container": f.container,
                 "health": f.serving} for n, f in facts.items()}
    assert not reachability.serving(RUN, facts)
    assert cluster_state.summarize(lives)["state"] != cluster_state.SERVING

""""The cluster serves" has one home (steps/serves.py): preflight (which then skips the port
mesh) and status/watch (cli/cluster_state.py) give the same answer for the same nodes."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

from k3deploy.cli import cluster_state
from k3deploy.facts.docker import Container
from k3deploy.steps import reachability, serves
from tests.unit.docker_facts import container

NAMES = ("n0", "n1", "n2")
RUN = SimpleNamespace(inv=SimpleNamespace(head=SimpleNamespace(name="n0"),
                                          nodes=[SimpleNamespace(name=n) for n in NAMES]))


def _inspect(running: bool | None) -> Container | None:
    return None if running is None else container(running)


CASES = list(itertools.product([True, False, None], [True, False, None], [200, 503, None]))


@pytest.mark.parametrize("head, other, health", CASES)
def test_preflight_and_status_agree(head, other, health):
    answer = None if health is None else {"health": {"status": health}}
    facts = {"n0": {"container": _inspect(head), serves.HEALTH: answer},
             "n1": {"container": _inspect(other)}, "n2": {"container": _inspect(True)}}
    lives = {n: {"reachable": True, "incident": None,
                 "container": f["container"],
                 "health": f.get(serves.HEALTH)} for n, f in facts.items()}
    pre = reachability.serving(RUN, facts)
    status = cluster_state.summarize(lives)["state"] == cluster_state.SERVING
    assert pre == status == (head is True and other is True and health == 200)


def test_a_node_that_did_not_answer_is_not_serving():
    facts = {"n0": {"container": _inspect(True), serves.HEALTH: {"health": {"status": 200}}},
             "n1": {"container": _inspect(True)}}
    assert not reachability.serving(RUN, facts)

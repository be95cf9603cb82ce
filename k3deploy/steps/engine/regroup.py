"""One decision before the engines start: is the process group relaunched whole?

The ranks of a multi-node engine form one torch.distributed group once, at start: rank 0's
store at --dist-init-addr waits for a fixed world size, and a formed group takes no new member.
PyTorch's own answer to a node that fails and is replaced is to stop every worker and start the
group again ("all existing workers are stopped, a new Worker Group is formed and all workers
are started", pytorch/elastic#65; torch.distributed.run: "Worker failures are handled
gracefully by restarting all workers"); SGLang has no way to re-admit a rank, and the guide
says reclaiming any one GPU "the whole serving group goes down ... re-forming the process
group means re-loading 1.56TB from cache". The survivors meanwhile sit in a collective that
never completes until --dist-timeout. So a rank that must start (its node was reclaimed and
replaced, its container exited) while other ranks still run cannot join them: every running
rank is stopped and the whole group started again, each rank with the same number as before
(ranks come from the inventory).

Decided once per run, from every node's engine container, by the step before launch
(guard-stop: a guard left watching an engine we remove would report an incident and stop
the group we start) and read by launch. Not for vLLM over Ray: its containers are the Ray
cluster's (steps/engine/ray_cluster.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from k3deploy.cluster.inventory import Inventory
from k3deploy.facts.docker import Container
from k3deploy.steps.base import AnyFact
from k3deploy.steps import probes
from k3deploy.steps.engine import raylayout


@dataclass(frozen=True)
class Regroup:
    running: dict[str, str] = field(default_factory=dict)  # node -> id of its running engine
    to_start: tuple[str, ...] = ()     # nodes whose rank has no running engine

    @property
    def whole(self) -> bool:
        """Some ranks run and others must start: the running ones cannot take them in."""
        return bool(self.running) and bool(self.to_start)

    def reason(self) -> str:
        return (f"{', '.join(self.to_start)} must start while "
                f"{', '.join(sorted(self.running))} still run the old group, which cannot "
                "take a new rank: every rank is relaunched, each keeping its rank")


def probes_for(inv: Inventory) -> list[AnyFact]:
    return [] if raylayout.in_use(inv) else [probes.engine_container(inv)]


def decide(states: Mapping[str, Container | None], inv: Inventory) -> Regroup:
    """From each node's engine container, in rank order."""
    if raylayout.in_use(inv):
        return Regroup()
    running, to_start = {}, []
    for rank, node in inv.ranked():
        state = states.get(node.name)
        if state and state.running and _own_rank(state, rank) and not _ray_node(state):
            running[node.name] = state.id
        elif not (state and state.running) or _ray_node(state):
            to_start.append(node.name)
    return Regroup(running, tuple(to_start))


def _ray_node(state: Container) -> bool:
    """A Ray cluster's container (engines/ray.py: `ray start --block` its command) where the
    inventory asks for no Ray (vLLM's mp executor): no rank of this group, only replaced. A
    worker's goes when the head's is replaced (`up --replace` from Ray to mp), so it is not
    one of the group's running ranks either."""
    return tuple(state.cmd[:2]) == ("start", "--block")


def _own_rank(state: Container, rank: int) -> bool:
    """A container started by hand with another rank is not this group's to relaunch: the
    wait step names it as a stray (steps/engine/wait.py rank_problem)."""
    found = probes.node_rank_arg(state.cmd)
    return found is None or found == str(rank)


def stops(decision: Regroup | None, node_name: str, state: Container | None) -> bool:
    """Launch: this node's running engine is one of the old group's,
    to be relaunched; the one launch started in its place is not."""
    if decision is None or not decision.whole or not state or not state.running:
        return False
    return decision.running.get(node_name) == state.id


def stopped_since(decision: Regroup | None, node_name: str, state: Container | None) -> bool:
    """Launch: this rank ran when the group was looked at, kept with the others, and has no
    running engine now: started alone it could not join them."""
    return (decision is not None and not decision.whole and node_name in decision.running
            and not (state and state.running))

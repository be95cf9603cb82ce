"""ray-cluster: for multi-node vLLM, the Ray head container, then the workers join one at a
time. Plans nothing for any other layout, so the one bringup playbook serves every config.

Each node's container is the one `launch` would start for it (same image, same
configuration label), with `ray start --block` as its main process; `launch` then execs
`vllm serve` on the head once `ray status` there counts every node and GPU.

Workers join one after another (the runner's `one_by_one` order), each only once its
`ray start` reported the node registered: several raylets registering at the same moment can
leave one out of the cluster (ray-project/ray#59778).
"""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field

from k3deploy import engines
from k3deploy.core.errors import StepFailed
from k3deploy.node import facts as F
from k3deploy.node.context import NodeContext, RunContext
from k3deploy.steps.engine import raylayout
from k3deploy.core.jsonvalue import JSON
from k3deploy.steps.base import Action, AnyFact, wait
from k3deploy.steps.engine.launch import Launching
from k3deploy.steps.engine.launch_look import LaunchFacts


@dataclass(frozen=True)
class RayFacts(LaunchFacts):
    """The launch's facts of this node's Ray container (its `log` a probe here: `ray start`'s
    output), and whether `ray start` registered the node. Off the Ray layout nothing is looked
    at: `ray_layout` False and nothing else known."""

    joined: bool = False
    ray_layout: bool = False     # derived: multi-node vLLM, the only layout over Ray


class RayParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    join_timeout: float = Field(default=120, gt=0)   # per node, until `ray start` registered it
    poll_seconds: float = Field(default=0.5, gt=0)


RayFactsT = TypeVar("RayFactsT", bound=RayFacts)


class RayJoining(Launching[RayFactsT, RayParams]):
    """The Ray cluster's containers (ray-cluster's, and the dry-fire's with its spec)."""

    head_first = True
    one_by_one = True
    needs_all_nodes = True
    serves_over_ray = False   # Launching.plan: here, start the containers themselves
    runs_engine = False

    def prepare(self, run: RunContext) -> None:
        if raylayout.in_use(run.inv):
            super().prepare(run)

    def probes(self, node: NodeContext) -> list[AnyFact]:
        if not raylayout.in_use(node.inv):
            return []
        name = node.inv.engine.container
        # The whole log for the "registered" line (a long-running head's has scrolled past
        # any tail); its end for the messages.
        joined = (f"{shlex.join(engines.docker_logs_argv(name))} 2>&1 | grep -qF "
                  f"{shlex.quote(raylayout.RAY_STARTED)}")
        return super().probes(node) + [
            F.Fact("joined", joined, F.exit_ok, sudo=True),
            F.command("log", engines.docker_logs_argv(name, tail=40), F.raw, sudo=True)]

    def observe(self, found: F.Found, node: NodeContext) -> RayFactsT:
        if not raylayout.in_use(node.inv):
            return self.Facts(cuda=None, container=None)
        return dataclasses.replace(super().observe(found, node), ray_layout=True)

    def plan(self, facts: RayFactsT, node: NodeContext) -> list[Action]:
        if not facts.ray_layout:
            return []
        actions = super().plan(facts, node)
        if actions:   # Launching calls it "start rank N"; say what it is here
            what = "start the Ray head" if node.is_head else f"join the Ray cluster (rank {node.rank})"
            actions[-1] = dataclasses.replace(actions[-1], description=what)
        if actions or not facts.joined:
            actions.append(wait("wait until `ray start` registered this node",
                                "`ray start` registered this node", poll=self.p.poll_seconds,
                                timeout=self.p.join_timeout, hint=f"check that the node reaches "
                                f"{node.inv.head.self_ip}:{node.inv.ports.ray} (k3deploy check)"))
        return actions

    def progress(self, facts: RayFactsT, node: NodeContext) -> None:
        state = facts.container
        if facts.ray_layout and state and not state.running:
            raise StepFailed(node.name, f"the Ray container exited ({state.exit_code}) "
                             f"before its node registered:\n{_tail(facts.log or '')}",
                             step=self.name)
        return None

    def _secret_actions(self, facts: RayFactsT, node: NodeContext) -> list[Action]:
        # Only the head's container carries the endpoint key (vllm serve runs there).
        return super()._secret_actions(facts, node) if node.is_head else []

    def detail(self, facts: RayFactsT, node: NodeContext) -> dict[str, JSON] | None:
        if not facts.ray_layout:
            return None
        return {**(super().detail(facts, node) or {}), "role": "head" if node.is_head else "worker"}


class RayCluster(RayJoining[RayFacts]):
    """Its apply is Step's, the wait included: the next node starts after it."""

    name = "ray-cluster"
    Facts = RayFacts
    Params = RayParams


def _tail(log: str, lines: int = 12) -> str:
    return "\n".join(log.splitlines()[-lines:])

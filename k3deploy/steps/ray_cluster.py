"""ray-cluster: for multi-node vLLM, the Ray head container, then the workers join one at a
time. Plans nothing for any other layout, so the one bringup playbook serves every config.

Each node's container is the one `launch` would start for it (same image, same
configuration label), with `ray start --block` as its main process; `launch` then execs
`vllm serve` on the head once `ray status` there counts every node and GPU.

Workers join one after another, each only once its `ray start` reported the node
registered: several raylets registering at the same moment can leave one out of the
cluster (ray-project/ray#59778).
"""

from __future__ import annotations

import dataclasses
import time

from pydantic import BaseModel, ConfigDict, Field

from k3deploy import engines
from k3deploy.core import interrupt
from k3deploy.node import facts as F
from k3deploy.core.errors import StepFailed
from k3deploy.steps import probes, raylayout
from k3deploy.steps.base import Step
from k3deploy.steps.launch import LaunchEngine


class RayParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    join_timeout: float = Field(default=120, gt=0)   # per node, until `ray start` registered it
    poll_seconds: float = Field(default=0.5, gt=0)


class RayCluster(LaunchEngine):
    name = "ray-cluster"
    summary = "multi-node vLLM: Ray head, then each worker joins in turn"
    Params = RayParams
    head_first = True
    needs_all_nodes = True
    serves_over_ray = False   # LaunchEngine.plan: here, start the containers themselves

    def prepare(self, run) -> None:
        if raylayout.in_use(run.inv):
            super().prepare(run)

    def facts(self, node):
        if not raylayout.in_use(node.inv):
            return {"ray_layout": False}
        return {**super().facts(node), "ray_layout": True}

    def plan(self, facts, node):
        if not facts["ray_layout"]:
            return []
        actions = super().plan(facts, node)
        if actions:   # LaunchEngine calls it "start rank N"; say what it is here
            what = "start the Ray head" if node.is_head else f"join the Ray cluster (rank {node.rank})"
            actions[-1] = dataclasses.replace(actions[-1], description=what)
        return actions

    def _secret_actions(self, facts, node):
        # Only the head's container carries the endpoint key (vllm serve runs there).
        return super()._secret_actions(facts, node) if node.is_head else []

    def apply(self, node, actions):
        if node.is_head:
            return self._start(node, actions)
        with node.run.inputs.ray_join_lock:
            self._start(node, actions)

    def _start(self, node, actions):
        Step.apply(self, node, actions)
        name = node.inv.engine.container
        deadline = time.monotonic() + self.p.join_timeout
        while True:
            log = node.conn.run(engines.docker_logs_argv(name, tail=40), sudo=True,
                                check=False).output
            if raylayout.joined(log):
                return
            state = probes.container_summary(F.gather(node.conn, [probes.container(name)])
                                             ["container"])
            if not state or not state["running"]:
                raise StepFailed(node.name, f"the Ray container exited "
                                 f"({(state or {}).get('exit_code')}) before its node "
                                 f"registered:\n{_tail(log)}", step=self.name)
            if time.monotonic() > deadline:
                raise StepFailed(node.name, f"`ray start` did not register this node within "
                                 f"{self.p.join_timeout:.0f}s:\n{_tail(log)}", step=self.name,
                                 hint=f"check that the node reaches {node.inv.head.self_ip}:"
                                 f"{node.inv.ports.ray} (k3deploy check)")
            interrupt.sleep(self.p.poll_seconds)

    def detail(self, facts, node):
        if not facts.get("ray_layout"):
            return None
        return {**super().detail(facts, node), "role": "head" if node.is_head else "worker"}


def _tail(log: str, lines: int = 12) -> str:
    return "\n".join(log.splitlines()[-lines:])

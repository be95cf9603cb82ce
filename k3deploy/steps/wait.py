"""wait: until rank 0 answers healthy. Fails fast when any rank's container exits, and when
the process group cannot form, instead of sitting at the barrier until --dist-timeout."""

from __future__ import annotations

import re
import time

from pydantic import BaseModel, ConfigDict, Field

from k3deploy import apikey, endpoint, engines
from k3deploy import facts as F
from k3deploy.errors import StepFailed
from k3deploy.steps import probes
from k3deploy.steps.base import Action, Step

LOADING = re.compile(r"Loading safetensors checkpoint shards:\s*(\d+)%")
READY = "The server is fired up"


class WaitParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    timeout: float | None = Field(default=None, gt=0)  # default: --dist-timeout + 10 min
    form_timeout: float = Field(default=900, gt=0)     # no weight loading by then: no group
    poll_seconds: float = Field(default=2.0, gt=0)


def container_state(node_ctx_conn, name: str) -> dict | None:
    found = F.gather(node_ctx_conn, [probes.container(name)])
    return probes.container_summary(found["container"])


def rank_problem(cmds: dict[str, list[str]], nnodes: int) -> str | None:
    """Duplicate or missing --node-rank across the running containers: the group never forms."""
    ranks = {}
    for node, cmd in cmds.items():
        if "--node-rank" in cmd:
            ranks.setdefault(cmd[cmd.index("--node-rank") + 1], []).append(node)
    if not ranks:
        return None
    dups = {r: n for r, n in ranks.items() if len(n) > 1}
    missing = sorted(set(map(str, range(nnodes))) - set(ranks))
    if not dups and not missing:
        return None
    parts = [f"rank {r} on {', '.join(n)}" for r, n in dups.items()]
    parts += [f"rank {r} on no node" for r in missing]
    return "the process group can never form: " + "; ".join(parts)


class WaitHealthy(Step):
    name = "wait"
    summary = "wait for the endpoint to answer healthy"
    Params = WaitParams
    needs_all_nodes = True

    def prepare(self, run):
        run.shared.setdefault("api_key", apikey.load_or_create(run.inv, run.session.state_dir,
                                                               create=False))

    def facts(self, node):
        state = container_state(node.conn, node.inv.engine.container)
        healthy = False
        if node.is_head and state and state["running"]:
            res = endpoint.probe(node.conn, node.inv, ["health"], node.run.shared["api_key"],
                                 step=self.name)
            healthy = res["health"]["status"] == 200
        return {"container": state, "healthy": healthy}

    def plan(self, facts, node):
        state = facts["container"]
        if not state:
            raise StepFailed(node.name, "no engine container; run launch first", step=self.name)
        if not state["running"]:
            raise StepFailed(node.name, f"rank {node.rank} container exited ({state['exit_code']})",
                             step=self.name, hint="k3deploy logs -i INV shows why")
        if node.is_head and not facts["healthy"]:
            return [Action("wait until rank 0 answers /health", wait="healthy")]
        return []

    def apply(self, node, actions):
        deadline = time.monotonic() + (self.p.timeout or node.inv.engine.dist_timeout + 600)
        started, formed, last_shown = time.monotonic(), False, ""
        while time.monotonic() < deadline:
            self._check_ranks(node)
            log = node.conn.run(engines.docker_logs_argv(node.inv.engine.container, tail=30),
                                sudo=True, check=False).output
            formed = formed or bool(LOADING.search(log)) or READY in log
            last_shown = self._show(node, log, last_shown)
            if self.facts(node)["healthy"]:
                return
            if not formed and time.monotonic() - started > self.p.form_timeout:
                raise StepFailed(node.name, f"no rank started loading weights within "
                                 f"{self.p.form_timeout:.0f}s: the process group did not form",
                                 step=self.name, hint="check that every node reaches "
                                 f"{node.inv.head.self_ip}:{node.inv.ports.dist_init} and the "
                                 "ranks are 0..N-1 (k3deploy check)")
            time.sleep(self.p.poll_seconds)
        raise StepFailed(node.name, "endpoint not healthy before the timeout", step=self.name)

    def _check_ranks(self, head):
        cmds, run = {}, head.run
        for ctx_node in run.inv.nodes:
            state = container_state(run.session.conn(ctx_node.name), run.inv.engine.container)
            if not state or not state["running"]:
                tail = run.session.conn(ctx_node.name).run(
                    engines.docker_logs_argv(run.inv.engine.container, tail=15), sudo=True,
                    check=False).output
                raise StepFailed(ctx_node.name, f"rank {run.inv.rank_of(ctx_node.name)} container "
                                 f"exited ({(state or {}).get('exit_code')}) while loading:\n{tail}",
                                 step=self.name)
            cmds[ctx_node.name] = [str(c) for c in state["cmd"]]
        problem = rank_problem(cmds, len(run.inv.nodes))
        if problem:
            raise StepFailed(head.name, problem, step=self.name,
                             hint="fix nodes[].rank, then k3deploy up --replace")

    def _show(self, node, log: str, last: str) -> str:
        lines = [ln for ln in log.splitlines() if LOADING.search(ln) or READY in ln]
        if lines and lines[-1] != last and node.run.ui:
            node.run.ui.say(f"{'':>14}{node.name}: {lines[-1].strip()[:120]}")
        return lines[-1] if lines else last

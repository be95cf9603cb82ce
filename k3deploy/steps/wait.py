"""wait: until rank 0 answers healthy. Fails fast when any rank's container exits, and when
the process group cannot form, instead of sitting at the barrier until --dist-timeout."""

from __future__ import annotations

import re
import time

from pydantic import BaseModel, ConfigDict, Field

from k3deploy.node import apikey, http_probe
from k3deploy import engines
from k3deploy.core import interrupt
from k3deploy.node import facts as F
from k3deploy.core.errors import StepFailed
from k3deploy.steps import probes, raylayout
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


def rank_problem(cmds: dict[str, list[str]],
                 expected: dict[str, int]) -> tuple[str, list[str]] | None:
    """Duplicate or missing --node-rank across the running containers: the group never forms.
    Returns the message and the nodes whose container runs another rank than the inventory
    gives them (started by hand, or from another inventory)."""
    running = {n: cmd[cmd.index("--node-rank") + 1] for n, cmd in cmds.items()
               if "--node-rank" in cmd}
    ranks: dict[str, list[str]] = {}
    for node, rank in running.items():
        ranks.setdefault(rank, []).append(node)
    dups = {r: n for r, n in ranks.items() if len(n) > 1}
    missing = sorted(set(map(str, expected.values())) - set(ranks)) if running else []
    if not dups and not missing:
        return None
    stray = [n for n, r in running.items() if r != str(expected[n])]
    parts = [f"{n} runs --node-rank {running[n]}, the inventory gives it rank {expected[n]}"
             for n in stray]
    parts += [f"rank {r} on {' and '.join(n)}" for r, n in dups.items()]
    parts += [f"rank {r} on no node" for r in missing]
    return "the process group can never form: " + "; ".join(parts), stray


def _finished_key(state: dict | None) -> str:
    """Docker's FinishedAt (RFC 3339, trailing zeros of the nanoseconds trimmed) as a string
    that sorts by time; a missing container sorts first."""
    if not state:
        return ""
    base, _, frac = (state.get("finished") or "").rstrip("Z").partition(".")
    return f"{base}.{frac.ljust(9, '0')}"


class WaitHealthy(Step):
    name = "wait"
    summary = "wait for the endpoint to answer healthy"
    Params = WaitParams
    needs_all_nodes = True

    def prepare(self, run):
        if run.inputs.api_key is None:   # launch, earlier in this run, may have settled it
            run.inputs.api_key = apikey.load_or_create(run.inv, run.session.state_dir,
                                                       create=False)

    def facts(self, node):
        state = container_state(node.conn, node.inv.engine.container)
        healthy = False
        if node.is_head and state and state["running"]:
            res = http_probe.probe(node.conn, node.inv, ["health"], node.run.inputs.api_key,
                                 step=self.name)
            healthy = res["health"]["status"] == 200
        return {"container": state, "healthy": healthy}

    def plan(self, facts, node):
        state = facts["container"]
        if not state:
            raise StepFailed(node.name, "no engine container; run launch first", step=self.name)
        if not state["running"]:
            raise StepFailed(node.name, f"rank {node.rank} container exited ({state['exit_code']})",
                             step=self.name, hint=f"`k3deploy logs -i {node.inv.source}` shows "
                             "why; fix it, then re-run `k3deploy up` (exited containers are "
                             "replaced)")
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
            if raylayout.in_use(node.inv):
                # The exec'd serve logs nowhere docker keeps; its ranks being placed on every
                # node (Ray holds the GPUs) is the sign the group formed, and losing them
                # without answering means it exited.
                formed = raylayout.check_serve_alive(node, self.name) or formed
            last_shown = self._show(node, log, last_shown)
            if self.facts(node)["healthy"]:
                return
            if not formed and time.monotonic() - started > self.p.form_timeout:
                raise StepFailed(node.name, f"no rank started loading weights within "
                                 f"{self.p.form_timeout:.0f}s: the process group did not form",
                                 step=self.name, hint="check that every node reaches "
                                 f"{node.inv.head.self_ip}:{node.inv.ports.dist_init} and the "
                                 "ranks are 0..N-1 (k3deploy check)")
            interrupt.sleep(self.p.poll_seconds)
        raise StepFailed(node.name, "endpoint not healthy before the timeout", step=self.name)

    def _check_ranks(self, head):
        run, name = head.run, head.run.inv.engine.container
        states = {n.name: container_state(run.session.conn(n.name), name) for n in run.inv.nodes}
        gone = [n for n, state in states.items() if not state or not state["running"]]
        if gone:
            raise self._exited(run, gone, states)
        cmds = {n: [str(c) for c in state["cmd"]] for n, state in states.items()}
        found = rank_problem(cmds, {n.name: run.inv.rank_of(n.name) for n in run.inv.nodes})
        if found:
            problem, stray = found
            removes = "; ".join(f"on {n}: docker rm -f {name}" for n in stray)
            hint = (f"remove the stray container ({removes}), then re-run `k3deploy up`"
                    if stray else "fix nodes[].rank, then k3deploy up --replace")
            raise StepFailed(stray[0] if stray else head.name, problem, step=self.name, hint=hint)

    def _exited(self, run, gone: list[str], states: dict) -> StepFailed:
        # One rank dying makes the others abort (NCCL): the first to exit is the cause.
        first = min(gone, key=lambda n: _finished_key(states[n]))
        logs = engines.docker_logs_argv(run.inv.engine.container, tail=15)
        tail = run.session.conn(first).run(logs, sudo=True, check=False).output
        what = (f"container exited ({states[first]['exit_code']})" if states[first]
                else "container is gone")
        after = [n for n in gone if n != first]
        also = f" ({', '.join(after)} exited after it: ranks abort when a peer dies)" if after else ""
        return StepFailed(first, f"rank {run.inv.rank_of(first)} {what} before the endpoint was "
                          f"up{also}; the end of its log:\n{tail}", step=self.name,
                          hint=f"`k3deploy logs -i {run.inv.source}` saves every rank's log; fix "
                          "the cause, then re-run `k3deploy up` (exited containers are replaced)")

    def _show(self, node, log: str, last: str) -> str:
        lines = [ln for ln in log.splitlines() if LOADING.search(ln) or READY in ln]
        if lines and lines[-1] != last and node.run.ui:
            node.run.ui.say(f"{'':>14}{node.name}: {lines[-1].strip()[:120]}")
        return lines[-1] if lines else last

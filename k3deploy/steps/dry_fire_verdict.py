"""dry-fire: the verdict on a dry-fire group that serves (steps/dry_fire.py started it), and
dry-fire-stop, which removes its containers once every node reported.

Head first, while every rank still runs: one chat completion through the endpoint; then on
every node: what the engine reached (each GPU's memory in use: SGLang allocates its weights
and whole KV pool before it serves, vLLM its KV cache, so it is the start-up's peak; the
start-up phases' times from its log, engines/startup_phases.py; the transport NCCL chose,
facts/nccl.py), the compile cache sealed (the dry-fire's key is the real launch's,
engines/dry_fire.py: the real launch then compiles nothing; Ray's containers have none), and
the report kept on the node (it makes a re-run's dry-fire plan nothing). The containers are
removed in a step of their own: a rank's report is taken while every other rank still runs
(over Ray, the head's container going takes the workers' ranks with it).
"""

from __future__ import annotations

import json
import time

from k3deploy.node import run_settle
from k3deploy import engines
from k3deploy.core.errors import StepFailed
from k3deploy.engines import dry_fire
from k3deploy.node import http_probe
from k3deploy.steps import probes
from k3deploy.steps.base import Action, Step, cmd, upload
from k3deploy.steps.compile_cache_seal import SealCompileCache
from k3deploy.steps.dry_fire_rules import HINT, passed_fact, report_path

REQUEST = "request"


def node_report(facts: dict, config: str) -> dict:
    gpus = facts.get("gpus") or []
    nccl = facts.get("nccl")
    return {"config": config, "gpu_used_mib": [g["used_mib"] for g in gpus],
            "phases_s": facts.get("phases") or {},
            "nccl_transport": nccl.transport if nccl else None,
            "nccl_devices": list(nccl.devices) if nccl else [], "at": time.time()}


class DryFireVerdict(SealCompileCache):
    name = "dry-fire"
    head_first = True
    needs_all_nodes = True

    def prepare(self, run) -> None:
        run_settle.api_key(run)
        self._started, self._reports, self._answers = time.time(), {}, {}

    def probes(self, node):
        return [*super().probes(node), probes.gpus(), passed_fact(node.inv),
                probes.startup_phase_times(node.inv, node.is_head),
                probes.nccl_transport(node.inv, node.is_head)]

    def observe(self, found, node):
        facts = super().observe(found, node)
        return {**facts, "gpus": found.get("gpus"), "phases": found.get("phases") or {},
                "nccl": found.get("nccl"), "dry_fire_passed": found.get("dry_fire_passed") or []}

    def plan(self, facts, node):
        current = facts["container"]
        if not (dry_fire.is_dry_fire(current) and current.running):
            return []
        config = current.labels.get(engines.CONFIG_LABEL, "unknown")
        if config in facts["dry_fire_passed"]:
            return []
        report = node_report(facts, config)
        head = [Action("send one chat completion to the dry-fire's endpoint", tag=REQUEST)] \
            if node.is_head else []
        return [*head, *super().plan(facts, node),
                cmd("create the dry-fire reports dir", "install", "-d", "-m", "755",
                    report_path(node.inv, config).rsplit("/", 1)[0], sudo=True, retry=True),
                upload("keep the dry-fire's report", report_path(node.inv, config),
                       json.dumps(report, sort_keys=True), mode=0o644, sudo=True)]

    def apply(self, node, actions):
        if actions and actions[0].tag == REQUEST:
            self._request(node)
            actions = actions[1:]
        for action in actions:
            if action.upload_to and action.upload_to.endswith(".json"):
                self._reports[node.name] = json.loads(action.content or "{}")
        super().apply(node, actions)

    def _request(self, node) -> None:
        asked = time.monotonic()
        fact = http_probe.fact("answer", node.inv, ["chat"], node.run.inputs.api_key)
        found = (node.run.executor.gather(self, node, [fact]).get("answer") or {}).get("chat") or {}
        if found.get("status") != 200:
            raise StepFailed(node.name, "dry-fire (dummy weights): the group serves, but a chat "
                             f"completion answered {found.get('status')}: "
                             f"{str(found.get('body') or found.get('error'))[:200]}",
                             step=self.name, hint=HINT)
        self._answers[node.name] = time.monotonic() - asked
        self._verdict_at = time.time()

    def detail(self, facts, node):
        return self._reports.get(node.name) or super().detail(facts, node)

    def closing_lines(self, run, all_facts):
        if not self._reports:
            return []
        seconds = getattr(self, "_verdict_at", time.time()) - self._started
        lines = [f"dry-fire: the group served with dummy weights and answered a chat "
                 f"completion {seconds:.0f}s after up began"]
        for name, report in self._reports.items():
            used = report.get("gpu_used_mib") or []
            peak = f"{max(used) / 1024:.1f} GiB" if used else "?"
            phases = ", ".join(f"{k} {v:.0f}s" for k, v in report.get("phases_s", {}).items())
            nccl = report.get("nccl_transport")
            lines.append(f"{'':>10}{name}: GPU memory up to {peak} on {len(used)} GPUs"
                         + (f"; NCCL over {nccl}" if nccl else "")
                         + (f"; {phases}" if phases else ""))
        return lines


class DryFireStop(Step):
    """The dry-fire's containers, removed on every node once the verdict is kept (a failed
    dry-fire's stay for `k3deploy logs`; the real launch replaces them)."""

    name = "dry-fire-stop"

    def probes(self, node):
        return [probes.engine_container(node.inv)]

    def plan(self, facts, node):
        if not dry_fire.is_dry_fire(facts["container"]):
            return []
        return [cmd("stop the dry-fire's engine",
                    *engines.docker_rm_argv(node.inv.engine.container), sudo=True, retry=True)]

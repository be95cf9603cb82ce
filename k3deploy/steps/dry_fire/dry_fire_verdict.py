"""dry-fire: the verdict on a dry-fire group that serves (steps/dry_fire/dry_fire.py started it), and
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

import dataclasses
import json
import time
from dataclasses import dataclass, field, fields

from k3deploy import engines
from k3deploy.core.errors import StepFailed
from k3deploy.core.jsonvalue import JSON
from k3deploy.engines import dry_fire
from k3deploy.engines.spec import LaunchSpec
from k3deploy.facts import http, record
from k3deploy.facts.docker import Container
from k3deploy.facts.nccl import NcclTransport
from k3deploy.facts.nvidia_smi import Gpu
from k3deploy.node import facts as F
from k3deploy.node import http_probe, run_settle
from k3deploy.node.context import NodeContext, RunContext
from k3deploy.steps import probes
from k3deploy.steps.base import Action, AnyFact, Step, cmd, upload
from k3deploy.steps.engine.compile_cache_seal import SealFacts, Sealing, seal_look
from k3deploy.steps.dry_fire import dry_fire_hang
from k3deploy.steps.dry_fire.dry_fire_rules import (HINT, PassedEverywhere, passed_everywhere,
                                                    passed_fact, passed_here, report_path)

REQUEST = "request"
KEPT = "report kept"


@dataclass(frozen=True)
class DryFireFacts(SealFacts):
    """The seal's facts (the launch's spec and compile caches) and what the engine reached."""
    dry_fire_passed: tuple[str, ...] = ()      # config labels with a kept report
    phases: dict[str, float] = field(default_factory=dict)
    nccl: NcclTransport | None = None


# The fields the verdict adds to the seal's: its probes' values, the others go to the seal.
_OWN = frozenset(f.name for f in fields(DryFireFacts)) - frozenset(
    f.name for f in fields(SealFacts))


@dataclass(frozen=True)
class Report:
    """What a node reached with dummy weights, kept on the node as JSON."""
    config: str
    gpu_used_mib: tuple[int, ...]
    phases_s: dict[str, float]
    nccl_transport: str | None
    nccl_devices: tuple[str, ...]
    at: float

    def doc(self) -> dict[str, JSON]:
        return {"config": self.config, "gpu_used_mib": list(self.gpu_used_mib),
                "phases_s": dict(self.phases_s), "nccl_transport": self.nccl_transport,
                "nccl_devices": list(self.nccl_devices), "at": self.at}

    def line(self, name: str) -> str:
        used = self.gpu_used_mib
        peak = f"{max(used) / 1024:.1f} GiB" if used else "?"
        phases = ", ".join(f"{k} {v:.0f}s" for k, v in self.phases_s.items())
        return (f"{'':>10}{name}: GPU memory up to {peak} on {len(used)} GPUs"
                + (f"; NCCL over {self.nccl_transport}" if self.nccl_transport else "")
                + (f"; {phases}" if phases else ""))


def node_report(gpus: tuple[Gpu, ...] | None, phases: dict[str, float],
                nccl: NcclTransport | None, config: str) -> Report:
    return Report(config, tuple(g.used_mib for g in gpus or ()), dict(phases),
                  nccl.transport if nccl else None, nccl.devices if nccl else (), time.time())


@dataclass(frozen=True)
class _Asked:
    """The chat completion the verdict sends itself."""
    answer: http.Endpoint


class DryFireVerdict(Sealing[DryFireFacts]):
    name = "dry-fire"
    head_first = True
    needs_all_nodes = True
    settles = True   # a report is kept on every node or the verdict is given again on all
    Facts = DryFireFacts

    def prepare(self, run: RunContext) -> None:
        run_settle.api_key(run)
        self._started = time.time()
        self._reports: dict[str, Report] = {}
        self._answers: dict[str, float] = {}

    def probes(self, node: NodeContext) -> list[AnyFact]:
        return [*super().probes(node), probes.gpus(), passed_fact(node.inv),
                probes.startup_phase_times(node.inv, node.is_head),
                probes.nccl_transport(node.inv, node.is_head)]

    def observe(self, found: F.Found, node: NodeContext) -> DryFireFacts:
        seal = seal_look({k: v for k, v in found.items() if k not in _OWN}, node)
        kept = {f.name: getattr(seal, f.name) for f in fields(seal) if f.name not in _OWN}
        return record(DryFireFacts, {k: v for k, v in found.items() if k in _OWN}, **kept)

    def settle(self, all_facts: dict[str, DryFireFacts], run: RunContext) -> PassedEverywhere:
        return passed_everywhere({n: _judged(f) for n, f in all_facts.items()},
                                 {n: f.dry_fire_passed for n, f in all_facts.items()})

    def plan(self, facts: DryFireFacts, node: NodeContext) -> list[Action]:
        config = _judged(facts)
        # A report this run kept is this group's: the run's decision predates it.
        if config is None or node.run.ledger.last(node.name, KEPT, self.label) or \
                passed_here(node.run, config, facts.dry_fire_passed):
            return []
        report = node_report(facts.gpus, facts.phases, facts.nccl, config)
        asked = ("send one chat completion and a batch of 32 long requests (the load of "
                 "sgl-project/sglang#39568) to the dry-fire's endpoint"
                 if dry_fire_hang.wants_load(facts.launch_spec)
                 else "send one chat completion to the dry-fire's endpoint")
        head = [Action(asked, tag=REQUEST, note=facts.launch_spec)] if node.is_head else []
        keep = upload("keep the dry-fire's report", report_path(node.inv, config),
                      json.dumps(report.doc(), sort_keys=True), mode=0o644, sudo=True)
        return [*head, *super().plan(facts, node),
                cmd("create the dry-fire reports dir", "install", "-d", "-m", "755",
                    report_path(node.inv, config).rsplit("/", 1)[0], sudo=True, retry=True),
                dataclasses.replace(keep, note=report, tag=KEPT)]

    def apply(self, node: NodeContext, actions: list[Action]) -> None:
        if actions and actions[0].tag == REQUEST:
            spec = actions[0].note   # the plan's: the launch's spec
            self._request(node, spec if isinstance(spec, LaunchSpec) else None)
            actions = actions[1:]
        for action in actions:
            if isinstance(action.note, Report):
                self._reports[node.name] = action.note
        super().apply(node, actions)

    def _request(self, node: NodeContext, spec: LaunchSpec | None) -> None:
        asked = time.monotonic()
        load = dry_fire_hang.wants_load(spec)
        fact = http_probe.fact("answer", node.inv, ["chat", *(["decode_batch"] if load else [])],
                               node.run.inputs.api_key,
                               dry_fire_hang.load_settings(spec) if load and spec else None)
        answer = record(_Asked, node.run.executor.gather(self, node, [fact])).answer
        chat = answer.chat
        if load and spec is not None and not (answer.decode_batch and answer.decode_batch.ok):
            self._hung(node, spec, answer.decode_batch or http.Answer(None, error=http.NO_RESULT))
        if chat is None or not chat.ok:
            raise StepFailed(node.name, "dry-fire (dummy weights): the group serves, but a chat "
                             f"completion answered {chat.status if chat else None}: "
                             f"{chat.shown() if chat else http.NO_RESULT}",
                             step=self.name, hint=HINT)
        self._answers[node.name] = time.monotonic() - asked
        self._verdict_at = time.time()

    def _hung(self, node: NodeContext, spec: LaunchSpec, batch: http.Answer) -> None:
        """The load failed: the head's engine log names why (the group is ended by then when
        its watchdog fired)."""
        fact = probes.engine_log(node.inv, True, tail=dry_fire_hang.LOG_TAIL)
        log = node.run.executor.gather(self, node, [fact]).get(fact.name) or ""
        raise dry_fire_hang.hang_error(node.name, self.name, spec, str(log), batch, HINT)

    def detail(self, facts: DryFireFacts, node: NodeContext) -> dict[str, JSON] | None:
        report = self._reports.get(node.name)
        return report.doc() if report else super().detail(facts, node)

    def closing_lines(self, run: RunContext, all_facts: dict[str, DryFireFacts]) -> list[str]:
        if not self._reports:
            return []
        seconds = getattr(self, "_verdict_at", time.time()) - self._started
        return [f"dry-fire: the group served with dummy weights and answered a chat "
                f"completion {seconds:.0f}s after up began",
                *(report.line(name) for name, report in self._reports.items())]


@dataclass(frozen=True)
class StopFacts:
    container: Container | None


class DryFireStop(Step[StopFacts]):
    """The dry-fire's containers, removed on every node once the verdict is kept (a failed
    dry-fire's stay for `k3deploy logs`; the real launch replaces them)."""

    name = "dry-fire-stop"
    Facts = StopFacts

    def probes(self, node: NodeContext) -> list[AnyFact]:
        return [probes.engine_container(node.inv)]

    def plan(self, facts: StopFacts, node: NodeContext) -> list[Action]:
        if not dry_fire.is_dry_fire(facts.container):
            return []
        return [cmd("stop the dry-fire's engine",
                    *engines.docker_rm_argv(node.inv.engine.container), sudo=True, retry=True)]


def _judged(facts: DryFireFacts) -> str | None:
    """The configuration of the dry-fire running on the node (None: none runs there)."""
    current = facts.container
    if current is None or not (dry_fire.is_dry_fire(current) and current.running):
        return None
    return current.labels.get(engines.CONFIG_LABEL, "unknown")

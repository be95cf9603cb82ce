"""dry-fire-launch, dry-fire-wait: the real multi-node group with dummy weights, started while
the weights still download (the verdict: steps/dry_fire/dry_fire_verdict.py).

Everything that fails only on real GPUs fails here in minutes instead of after the download:
a flag the engine rejects, an image without the model's architecture or parsers, NCCL that
cannot initialise, a rank out of memory at the real memory figures (`--load-format dummy`
allocates the real weights and KV pool, engines/dry_fire.py). The launch is the launch step's
own (same spec, same container command, plus `--load-format dummy` and a label), the wait the
wait step's; they only decide whether a dry-fire is due, and name it in their errors. A
failure stops `up` (exit 1) naming the rank and the engine's own line; the detached download
keeps running, so the fix costs no byte of it.

Multi-node vLLM runs its group over Ray: dry-fire-ray-cluster forms a Ray cluster of dry-fire
containers first (the ray-cluster step's, with the dry-fire's spec), then dry-fire-launch execs
`vllm serve --load-format dummy` on its head, as the real launch does.

Planned nothing: with --no-dry-fire, on one node (the real launch is as quick to tell), when
the real group already runs with this configuration, or when a dry-fire passed on every node
(each node's report file of its configuration). A report on some nodes only (a run cut short
between the nodes' reports) is no pass: the group fires again on every node, the dry-fire
containers an earlier run left replaced (issue 53).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

from pydantic import BaseModel

from k3deploy import engines
from k3deploy.core.errors import EngineImageError, StepFailed
from k3deploy.engines import dry_fire
from k3deploy.engines.spec import LaunchSpec
from k3deploy.facts.docker import Container
from k3deploy.node import facts as F
from k3deploy.node.context import NodeContext, RunContext
from k3deploy.steps.engine import raylayout, serves
from k3deploy.steps.base import Action, AnyFact, settled, wait
from k3deploy.steps.dry_fire.dry_fire_rules import (HINT, SMALL_FILES, PassedEverywhere,
                                                    missing_small_files, passed_everywhere,
                                                    passed_fact, passed_here, skipped)
from k3deploy.steps.engine.launch import LaunchEngine, LaunchParams, Launching, StartsEngine
from k3deploy.steps.engine.launch_look import LaunchFacts
from k3deploy.steps.engine.ray_cluster import RayFacts, RayJoining, RayParams
from k3deploy.steps.engine.wait import WaitFacts, WaitHealthy


@dataclass(frozen=True)
class DryFireLaunchFacts(LaunchFacts):
    """The launch's facts with the dry-fire's spec, and what decides whether one is due."""

    small_missing: tuple[str, ...] = ()      # small files not on the node yet ('*': no snapshot)
    dry_fire_passed: tuple[str, ...] = ()    # config labels a dry-fire passed with on the node
    real_config: str = ""                    # derived: the real launch's configuration label


@dataclass(frozen=True)
class DryFireRayFacts(RayFacts):
    """The ray-cluster's facts with the dry-fire's spec."""

    dry_fire_passed: tuple[str, ...] = ()
    real_config: str = ""                    # derived, as DryFireLaunchFacts'


class DueFacts(Protocol):
    """What decides whether a dry-fire is due (either dry-fire Facts)."""

    @property
    def launch_spec(self) -> LaunchSpec: ...
    @property
    def container(self) -> Container | None: ...
    @property
    def dry_fire_passed(self) -> tuple[str, ...]: ...
    @property
    def real_config(self) -> str: ...


Due = TypeVar("Due", DryFireLaunchFacts, DryFireRayFacts)


LaunchFactsT = TypeVar("LaunchFactsT", bound=LaunchFacts)
ParamsT = TypeVar("ParamsT", bound=BaseModel, covariant=True)


class _DummyWeights(Launching[LaunchFactsT, ParamsT]):
    """The launch's spec with dummy weights; the nodes whose dry-fire this run started."""

    def prepare(self, run: RunContext) -> None:
        super().prepare(run)
        self._launched: set[str] = set()

    def adjust_spec(self, spec: LaunchSpec) -> LaunchSpec:
        return dry_fire.dry_fire_spec(spec)


class DryFireLaunch(_DummyWeights[DryFireLaunchFacts, LaunchParams],
                    StartsEngine[DryFireLaunchFacts]):
    name = "dry-fire-launch"
    Facts = DryFireLaunchFacts
    Params = LaunchParams

    def settle(self, all_facts: dict[str, DryFireLaunchFacts],
               run: RunContext) -> PassedEverywhere | None:
        """Whether a dry-fire passed is the cluster's answer, not a node's (PassedEverywhere):
        due on one node, it is due on all. Whether the real group is relaunched whole is the
        real launch's decision; a dry-fire's containers are replaced anyway."""
        return None if skipped(run) else _passed(all_facts)

    def probes(self, node: NodeContext) -> list[AnyFact]:
        found = super().probes(node)
        if skipped(node.run):
            return found
        return [*found, missing_small_files(node.inv, settled(node.run.inputs.manifest, "manifest")),
                passed_fact(node.inv)]

    def observe(self, found: F.Found, node: NodeContext) -> DryFireLaunchFacts:
        return _with_real_config(super().observe(found, node), node)

    def due(self, facts: DryFireLaunchFacts, node: NodeContext) -> bool:
        return _due(facts, node)

    def plan(self, facts: DryFireLaunchFacts, node: NodeContext) -> list[Action]:
        if not self.due(facts, node):
            return []
        missing = facts.small_missing
        if missing:
            return [wait(f"wait until {SMALL_FILES} ({len(missing)} to come)", SMALL_FILES,
                         poll=2.0, hint="the download of the small files is stuck: "
                         "`k3deploy status` shows the downloader's state")]
        if raylayout.in_use(node.inv):   # its containers are dry-fire-ray-cluster's, fresh
            return super().plan(facts, node)
        return super().plan(_fresh(facts, node, self._launched), node)

    def apply(self, node: NodeContext, actions: list[Action]) -> None:
        if actions and actions[0].wait and actions[0].wait.until == SMALL_FILES:
            actions = self.plan(self.run_wait(node, actions[0]), node)
        # Before the start wait: from here on the dry-fire running is this run's own, which the
        # wait's plan must wait for, not replace.
        self._launched.add(node.name)
        try:
            super().apply(node, actions)
        except StepFailed as err:
            raise _named(err, self.name) from None


class DryFireRayCluster(_DummyWeights[DryFireRayFacts, RayParams], RayJoining[DryFireRayFacts]):
    """Multi-node vLLM: the Ray cluster of the dry-fire's containers (its spec and label), head
    first, the workers joining one by one; dry-fire-launch then execs the serve on its head."""

    name = "dry-fire-ray-cluster"
    Facts = DryFireRayFacts
    Params = RayParams

    def probes(self, node: NodeContext) -> list[AnyFact]:
        found = super().probes(node)
        return [*found, passed_fact(node.inv)] if found and not skipped(node.run) else found

    def settle(self, all_facts: dict[str, DryFireRayFacts],
               run: RunContext) -> PassedEverywhere | None:
        """As DryFireLaunch.settle: the Ray cluster is formed again on every node or none."""
        if skipped(run) or not any(f.ray_layout for f in all_facts.values()):
            return None
        return _passed(all_facts)

    def observe(self, found: F.Found, node: NodeContext) -> DryFireRayFacts:
        facts = super().observe(found, node)
        if not facts.ray_layout or skipped(node.run):
            return facts
        return _with_real_config(facts, node)

    def plan(self, facts: DryFireRayFacts, node: NodeContext) -> list[Action]:
        if not (facts.ray_layout and _due(facts, node)):
            return []
        return super().plan(_fresh(facts, node, self._launched), node)

    def apply(self, node: NodeContext, actions: list[Action]) -> None:
        self._launched.add(node.name)
        try:
            super().apply(node, actions)
        except StepFailed as err:
            raise _named(err, self.name) from None


class DryFireWait(WaitHealthy):
    name = "dry-fire-wait"

    def plan(self, facts: WaitFacts, node: NodeContext) -> list[Action]:
        # Nothing to wait for when this run has no dry-fire (a failed one's container left by
        # an earlier run is the real launch's to replace), none was due, or it was stopped.
        # Passed on every node, dry-fire-launch started none: one left by a run cut short
        # after its verdict, running or exited since, is dry-fire-stop's to remove.
        if skipped(node.run) or not dry_fire.is_dry_fire(facts.container) or \
                _none_due(node.run):
            return []
        return super().plan(facts, node)

    def apply(self, node: NodeContext, actions: list[Action]) -> None:
        try:
            super().apply(node, actions)
        except StepFailed as err:
            raise _named(err, self.name) from None


def _named(err: StepFailed, step: str) -> StepFailed:
    image = isinstance(err, EngineImageError)   # its own fix; the download goes on meanwhile
    hint = (f"{err.hint} (the weights keep downloading meanwhile: `k3deploy status` shows how "
            "far)") if image else HINT
    return (EngineImageError if image else StepFailed)(
        err.node, f"dry-fire (dummy weights): {err}", step=step, hint=hint)


def _with_real_config(facts: Due, node: NodeContext) -> Due:
    """The real launch's configuration label (from the same probes' values) beside the
    dry-fire's spec."""
    real = LaunchEngine().spec(facts, node)
    return dataclasses.replace(facts, real_config=real.labels[engines.CONFIG_LABEL])


def _due(facts: DueFacts, node: NodeContext) -> bool:
    """No dry-fire of this spec passed on every node, and the real group does not already
    run."""
    if skipped(node.run) or passed_here(node.run, facts.launch_spec.labels[engines.CONFIG_LABEL],
                                        facts.dry_fire_passed):
        return False
    return not serves.runs_configuration(facts.container, facts.real_config)


def _none_due(run: RunContext) -> bool:
    """This run's dry-fire steps found a pass of every node's configuration: none fired."""
    decided = run.ledger.decided(PassedEverywhere)
    return decided is not None and decided.everywhere


def _passed(all_facts: Mapping[str, DueFacts]) -> PassedEverywhere:
    return passed_everywhere({n: f.launch_spec.labels[engines.CONFIG_LABEL]
                              for n, f in all_facts.items()},
                             {n: f.dry_fire_passed for n, f in all_facts.items()})


def _fresh(facts: Due, node: NodeContext, launched: set[str]) -> Due:
    """A dry-fire is a fresh group: one left by an earlier run (a rank failed, the rest wait
    for it in vain) is replaced on every node; this run's own is kept."""
    current = facts.container
    if current is not None and dry_fire.is_dry_fire(current) and node.name not in launched:
        return dataclasses.replace(facts, container=dataclasses.replace(current, running=False))
    return facts

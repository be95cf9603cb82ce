"""compile-cache-seal: after verify passed, mark the launch's compile cache complete (only a
cache an engine verifiably served with is sealed; steps/engine/compile_cache_prepare.py holds the rest)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TypeVar

from k3deploy.core.jsonvalue import JSON

from k3deploy.facts import record
from k3deploy.node import facts as F
from k3deploy.node.context import NodeContext
from k3deploy.remote import script_text
from k3deploy.steps import node_files
from k3deploy.steps.base import Action, AnyFact, Step, cmd, upload
from k3deploy.steps.engine.compile_cache_prepare import SCRIPT, script_path, sealed_fact
from k3deploy.steps.engine import launch_look
from k3deploy.steps.engine.launch_look import LaunchFacts


@dataclass(frozen=True)
class SealFacts(LaunchFacts):
    """The launch's facts (its spec names the cache dir) and every key dir's state."""

    compile_caches: dict[str, str] = field(default_factory=dict)  # key -> "sealed" | "open"


def seal_look(found: F.Found, node: NodeContext) -> SealFacts:
    """The seal's facts from its probes' values (the dry-fire's verdict records its own
    fields itself)."""
    return launch_look.with_spec(record(SealFacts, found), node)


SealFactsT = TypeVar("SealFactsT", bound=SealFacts)


class Sealing(Step[SealFactsT]):
    """The seal's look and plan, for compile-cache-seal and the dry-fire's verdict."""

    def probes(self, node: NodeContext) -> list[AnyFact]:
        return [*launch_look.probes(node), sealed_fact(node.inv)]

    def plan(self, facts: SealFactsT, node: NodeContext) -> list[Action]:
        spec = facts.launch_spec
        if spec.compile_cache_host_dir is None:
            return []
        key = spec.compile_cache_host_dir.rsplit("/", 1)[-1]
        if facts.compile_caches.get(key) != "open":
            return []  # sealed already, or the engine wrote nothing there
        inv = node.inv
        return node_files.changed_only([
            upload(f"upload {SCRIPT}", script_path(inv), script_text(SCRIPT), mode=0o644,
                   sudo=True),
            cmd("seal the compile cache", "python3", script_path(inv), "seal",
                spec.compile_cache_host_dir, json.dumps(facts.key_inputs, sort_keys=True),
                sudo=True)], facts.node_files)

    def detail(self, facts: SealFactsT, node: NodeContext) -> dict[str, JSON] | None:
        return {"dir": facts.launch_spec.compile_cache_host_dir}


class SealCompileCache(Sealing[SealFacts]):
    name = "compile-cache-seal"
    Facts = SealFacts

    def observe(self, found: F.Found, node: NodeContext) -> SealFacts:
        return seal_look(found, node)

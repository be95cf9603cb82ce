"""compile-cache-seal: after verify passed, mark the launch's compile cache complete (only a
cache an engine verifiably served with is sealed; steps/engine/compile_cache_prepare.py holds the rest)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from k3deploy.facts import record
from k3deploy.node import facts as F
from k3deploy.node.context import NodeContext
from k3deploy.remote import script_text
from k3deploy.steps import node_files
from k3deploy.steps.base import Action, Step, cmd, upload
from k3deploy.steps.engine.compile_cache_prepare import SCRIPT, script_path, sealed_fact
from k3deploy.steps.engine import launch_look
from k3deploy.steps.engine.launch_look import LaunchFacts


@dataclass(frozen=True)
class SealFacts(LaunchFacts):
    """The launch's facts (its spec names the cache dir) and every key dir's state."""

    compile_caches: dict[str, str] = field(default_factory=dict)  # key -> "sealed" | "open"


class SealCompileCache(Step[SealFacts]):
    name = "compile-cache-seal"
    Facts = SealFacts

    def probes(self, node: NodeContext) -> list[F.Fact]:
        return [*launch_look.probes(node), sealed_fact(node.inv)]

    def observe(self, found: F.Found, node: NodeContext) -> SealFacts:
        # SealFacts, not self.Facts: the dry-fire's verdict records its own fields itself.
        return launch_look.with_spec(record(SealFacts, found), node)

    def plan(self, facts: SealFacts, node: NodeContext) -> list[Action]:
        spec = facts.spec
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

    def detail(self, facts: SealFacts, node: NodeContext) -> dict | None:
        return {"dir": facts.spec.compile_cache_host_dir}

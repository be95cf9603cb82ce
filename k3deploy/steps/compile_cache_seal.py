"""compile-cache-seal: after verify passed, mark the launch's compile cache complete (only a
cache an engine verifiably served with is sealed; steps/compile_cache_prepare.py holds the rest)."""

from __future__ import annotations

import json

from k3deploy.steps import node_files
from k3deploy.steps.base import Step, cmd, upload
from k3deploy.steps.compile_cache_prepare import SCRIPT, script_path, sealed_fact
from k3deploy.steps.launch import LaunchEngine  # the launch's own spec: one decision
from k3deploy.remote import script_text


class SealCompileCache(Step):
    name = "compile-cache-seal"

    def probes(self, node):
        return [*LaunchEngine().probes(node), sealed_fact(node.inv)]

    def observe(self, found, node):
        facts = LaunchEngine().observe(found, node)
        return {**facts, "compile_caches": found["compile_caches"]}

    def plan(self, facts, node):
        spec = facts["spec"]
        if spec.compile_cache_host_dir is None:
            return []
        key = spec.compile_cache_host_dir.rsplit("/", 1)[-1]
        if facts["compile_caches"].get(key) != "open":
            return []  # sealed already, or the engine wrote nothing there
        inv = node.inv
        return node_files.changed_only([
            upload(f"upload {SCRIPT}", script_path(inv), script_text(SCRIPT), mode=0o644,
                   sudo=True),
            cmd("seal the compile cache", "python3", script_path(inv), "seal",
                spec.compile_cache_host_dir, json.dumps(facts["key_inputs"], sort_keys=True),
                sudo=True)], facts.get(node_files.FACT))

    def detail(self, facts, node):
        return {"dir": facts["spec"].compile_cache_host_dir}

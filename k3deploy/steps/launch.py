"""launch: the engine container on every node with its rank, head first.

A running container whose configuration digest matches is left alone; a different one is only
replaced with --replace, because replacing means re-loading 1.5 TB of weights.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from k3deploy.node import apikey
from k3deploy import engines
from k3deploy.core import interrupt
from k3deploy.node import facts as F
from k3deploy.engines import spec_from_inventory
from k3deploy.core.errors import StepFailed
from k3deploy.cluster.hubmeta import manifest_for
from k3deploy.steps import compile_cache, probes, raylayout
from k3deploy.steps.base import Step, cmd, upload
from k3deploy.steps.image import chosen_image


def secret_file(spec) -> tuple[str, Callable[[str], str]]:
    """Where the engine's key file goes on the node, and how its content is rendered."""
    if spec.engine == "sglang":
        return engines.sglang_secret_host_path(spec), engines.sglang_secret_config
    return engines.vllm_env_host_path(spec), engines.vllm_secret_env


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class LaunchEngine(Step):
    name = "launch"
    summary = "start the engine container with the node's rank"
    head_first = True
    needs_all_nodes = True
    # Multi-node vLLM: the ray-cluster step starts the containers; launch only execs
    # `vllm serve` on the head (steps/raylayout.py). RayCluster sets this False.
    serves_over_ray = True

    def prepare(self, run) -> None:
        run.inputs.api_key = apikey.load_or_create(run.inv, run.session.state_dir,
                                                   create=not run.check)
        manifest_for(run)

    def spec(self, facts, node):
        return self.spec_and_cache_key(facts, node)[0]

    def spec_and_cache_key(self, facts, node):
        """(the launch spec with its config label, the compile cache key's inputs or None)"""
        run = node.run
        spec = spec_from_inventory.build(node.inv, node.node, node.rank, chosen_image(facts, node),
                                run.inputs.manifest.sha, with_key=bool(run.inputs.api_key))
        inputs = None
        if not engines.uses_ray(spec):  # Ray's containers are started by ray-cluster
            spec, inputs = compile_cache.keyed(spec, facts, node.inv)
        return engines.with_config_label(spec, run.inputs.api_key), inputs

    def probes(self, node):
        # The key file's place depends on the inventory alone, not on facts.
        key_path = spec_from_inventory.api_key_file(node.inv)
        found = [*compile_cache.key_probes(node.inv), probes.engine_container(node.inv),
                 F.native("key", "sha256_hex", [key_path], F.text, sudo=True)]
        if self.serves_over_ray and raylayout.in_use(node.inv) and node.is_head:
            found += raylayout.head_probes(node)
        return found

    def facts_from(self, found, node):
        found = dict(found)
        spec, key_inputs = self.spec_and_cache_key(found, node)
        ray = raylayout.head_facts(found) if (
            self.serves_over_ray and engines.uses_ray(spec) and node.is_head) else {}
        key_file = found.pop("key") if spec.secrets_host_dir else None
        return {**found, "spec": spec, "container": probes.container_summary(found["container"]),
                "key_file_sha": key_file, "key_inputs": key_inputs, **ray}

    def plan(self, facts, node):
        spec, current = facts["spec"], facts["container"]
        if self.serves_over_ray and engines.uses_ray(spec):
            return raylayout.launch_plan(facts, node)
        want = spec.labels[engines.CONFIG_LABEL]
        if current and current["running"] and current["labels"].get(engines.CONFIG_LABEL) == want:
            return []
        actions = self._secret_actions(facts, node)
        if current and current["running"] and not node.run.option("replace"):
            raise StepFailed(node.name, f"container {spec.container_name} runs another "
                             f"configuration ({current['labels'].get(engines.CONFIG_LABEL)} != "
                             f"{want})", step=self.name,
                             hint="re-run with --replace to restart it (weights are reloaded)")
        if current:
            actions.append(cmd(f"remove old container {spec.container_name}",
                               *engines.docker_rm_argv(spec.container_name), sudo=True, retry=True))
        if spec.compile_cache_host_dir is not None:
            actions += compile_cache.prepare_actions(node, spec, facts)
        return actions + [cmd(f"start rank {spec.node_rank}", *engines.node_launch_argvs(spec)[0],
                              sudo=True)]

    def _secret_actions(self, facts, node):
        spec, key = facts["spec"], node.run.inputs.api_key
        if not spec.secrets_host_dir:
            return []
        path, render = secret_file(spec)
        content = render(key)
        if facts["key_file_sha"] == _sha(content):
            return []
        return [cmd("create secrets dir (0700)", "install", "-d", "-m", "700",
                    spec.secrets_host_dir, sudo=True, retry=True),
                upload("write the endpoint key (0600)", path, content, sudo=True)]

    def apply(self, node, actions):
        super().apply(node, actions)
        if self.serves_over_ray and raylayout.in_use(node.inv):
            return   # the plan's own wait saw the serve take the GPUs
        interrupt.sleep(1.0)  # an engine that dies on bad flags or CUDA mismatch does so at once
        state = probes.container_summary(F.gather(
            node.conn, [probes.engine_container(node.inv)])["container"])
        if not state or not state["running"]:
            tail = node.conn.run(engines.docker_logs_argv(node.inv.engine.container, tail=15),
                                 sudo=True, check=False).output
            raise StepFailed(node.name, f"rank {node.rank} container exited "
                             f"({(state or {}).get('exit_code')}) right after start:\n{tail}",
                             step=self.name)

    def inputs(self, node):
        return {"engine": node.inv.engine.model_dump(), "ports": node.inv.ports.model_dump()}

    def detail(self, facts, node):
        return {"image": facts["spec"].image, "rank": node.rank,
                "config": facts["spec"].labels[engines.CONFIG_LABEL]}

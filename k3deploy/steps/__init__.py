"""Step registry: playbooks name steps by these keys."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from k3deploy.core.errors import PlaybookError

if TYPE_CHECKING:
    from k3deploy.steps.base import AnyStep

BRINGUP, TEARDOWN, ANY = "bring-up", "teardown", "any"
# (name, "module:Class", phase), bring-up order first, then teardown order; classes are imported
# lazily so `k3deploy plan` does not pay for SSH imports. The phase is what `status` columns and
# an interrupted run's notes are derived from, so a new step cannot be left out of them.
_STEPS = (
    ("preflight", "k3deploy.steps.checks.preflight:Preflight", BRINGUP),
    ("fabric-mesh", "k3deploy.steps.fabric.fabric_mesh:FabricMesh", BRINGUP),
    ("nvme", "k3deploy.steps.disks.nvme:MoveToNvme", BRINGUP),
    ("download", "k3deploy.steps.weights.download:DownloadWeights", BRINGUP),
    ("image", "k3deploy.steps.engine.image:PullImage", BRINGUP),
    ("dry-fire-ray-cluster", "k3deploy.steps.dry_fire.dry_fire:DryFireRayCluster", BRINGUP),
    ("dry-fire-launch", "k3deploy.steps.dry_fire.dry_fire:DryFireLaunch", BRINGUP),
    ("dry-fire-wait", "k3deploy.steps.dry_fire.dry_fire:DryFireWait", BRINGUP),
    ("dry-fire", "k3deploy.steps.dry_fire.dry_fire_verdict:DryFireVerdict", BRINGUP),
    ("dry-fire-stop", "k3deploy.steps.dry_fire.dry_fire_verdict:DryFireStop", BRINGUP),
    ("ray-cluster", "k3deploy.steps.engine.ray_cluster:RayCluster", BRINGUP),
    ("launch", "k3deploy.steps.engine.launch:LaunchEngine", BRINGUP),
    ("wait", "k3deploy.steps.engine.wait:WaitHealthy", BRINGUP),
    ("verify", "k3deploy.steps.engine.verify:VerifyEndpoint", BRINGUP),
    ("compile-cache-seal", "k3deploy.steps.engine.compile_cache_seal:SealCompileCache", BRINGUP),
    ("guard", "k3deploy.steps.guard:StartGuard", BRINGUP),
    ("collect-logs", "k3deploy.steps.teardown:CollectLogs", TEARDOWN),
    ("guard-stop", "k3deploy.steps.guard:StopGuard", TEARDOWN),
    ("teardown", "k3deploy.steps.teardown:RemoveContainers", TEARDOWN),
    ("stop-download", "k3deploy.steps.teardown:StopDownload", TEARDOWN),
    ("wipe-weights", "k3deploy.steps.teardown:WipeWeights", TEARDOWN),
    ("stop-peer-server", "k3deploy.steps.weights.peer_server_stop:StopPeerServer", TEARDOWN),
    ("file", "k3deploy.steps.files:EnsureFile", ANY),
)
REGISTRY = {name: target for name, target, _ in _STEPS}


def steps_in(phase: str) -> tuple[str, ...]:
    """The registered steps of one phase, in registry order."""
    return tuple(name for name, _, p in _STEPS if p == phase)


# The steps that plan anything only for multi-node vLLM (its group is Ray's).
RAY_STEPS = ("dry-fire-ray-cluster", "ray-cluster")

# The steps that start, or need, the engine containers: what a teardown undoes, and what keeps
# running on the nodes when a run stops during them.
ENGINE_STEPS = ("ray-cluster", "launch", "wait", "verify")


def step_class(name: str) -> type[AnyStep]:
    try:
        module_name, cls = REGISTRY[name].split(":")
    except KeyError:
        raise PlaybookError(f"unknown step {name!r}; known steps: {', '.join(sorted(REGISTRY))}") from None
    found = getattr(importlib.import_module(module_name), cls)
    from k3deploy.steps.base import Step   # imported by the step's module just now
    if not (isinstance(found, type) and issubclass(found, Step)):
        raise PlaybookError(f"the registry's {REGISTRY[name]} is not a step")
    return found

"""Step registry: playbooks name steps by these keys."""

from __future__ import annotations

import importlib

from k3deploy.core.errors import PlaybookError

# name -> "module:Class"; imported lazily so `k3deploy plan` does not pay for SSH imports.
REGISTRY = {
    "preflight": "k3deploy.steps.preflight:Preflight",
    "nvme": "k3deploy.steps.nvme:MoveToNvme",
    "download": "k3deploy.steps.download:DownloadWeights",
    "image": "k3deploy.steps.image:PullImage",
    "ray-cluster": "k3deploy.steps.ray_cluster:RayCluster",
    "launch": "k3deploy.steps.launch:LaunchEngine",
    "wait": "k3deploy.steps.wait:WaitHealthy",
    "verify": "k3deploy.steps.verify:VerifyEndpoint",
    "collect-logs": "k3deploy.steps.teardown:CollectLogs",
    "teardown": "k3deploy.steps.teardown:RemoveContainers",
    "stop-download": "k3deploy.steps.teardown:StopDownload",
    "wipe-weights": "k3deploy.steps.teardown:WipeWeights",
    "stop-peer-server": "k3deploy.steps.peers:StopPeerServer",
    "file": "k3deploy.steps.files:EnsureFile",
    "compile-cache-seal": "k3deploy.steps.compile_cache:SealCompileCache",
    "guard": "k3deploy.steps.guard:StartGuard",
    "guard-stop": "k3deploy.steps.guard:StopGuard",
}

# The steps that start, or need, the engine containers: what a teardown undoes, and what keeps
# running on the nodes when a run stops during them.
ENGINE_STEPS = ("ray-cluster", "launch", "wait", "verify")


def step_class(name: str):
    try:
        module_name, cls = REGISTRY[name].split(":")
    except KeyError:
        raise PlaybookError(f"unknown step {name!r}; known steps: {', '.join(sorted(REGISTRY))}") from None
    return getattr(importlib.import_module(module_name), cls)

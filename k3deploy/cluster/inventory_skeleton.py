"""`k3deploy plan ... --emit-inventory FILE`: an inventory skeleton for the chosen shape.

The shape is the Inventory section of docs/architecture.md. Node addresses are placeholders
from the RFC 5737 documentation ranges (they route nowhere), so a skeleton can pass validation
yet never reach a real machine by accident.
"""

from __future__ import annotations

import ipaddress
from typing import NotRequired, TypedDict

import yaml

from k3deploy.cluster import sizing
from k3deploy.cluster.sizing import SizingResult
from k3deploy.engines.layout import DEFAULT_EXECUTOR, VLLM_MAX_NODES
from k3deploy.engines.static_fraction import FLAGS, default_static_fraction

PLACEHOLDER_PUBLIC_NET = ipaddress.ip_network("203.0.113.0/24")  # TEST-NET-3
PLACEHOLDER_PRIVATE_NET = ipaddress.ip_network("192.0.2.0/24")  # TEST-NET-1
MODEL_REPO = "moonshotai/Kimi-K3"
HF_ENDPOINT = "https://huggingface.co"


class NodeDoc(TypedDict):
    name: str
    address: str
    private_address: str
    nic: str
    port: NotRequired[int]      # the node's own SSH port, when it differs from ssh.port


class ModelDoc(TypedDict):
    repo: str
    revision: str
    endpoint: str
    precision: str


class EngineDoc(TypedDict):
    kind: str
    executor: NotRequired[str]
    image: str | None
    container: str
    args: dict[str, float]
    env: dict[str, str]
    context_length: int


class _Executor(TypedDict, total=False):
    executor: str


class GpuDoc(TypedDict):
    model: str
    count: int


class PortsDoc(TypedDict):
    dist_init: int
    serve: int
    ray: int


class PathsDoc(TypedDict):
    nvme: str
    hf_home: str
    docker_root: str


class SshDoc(TypedDict):
    user: str | None            # None: init's hosts named no login user (the file says null)
    port: int
    key: NotRequired[str]
    known_hosts: NotRequired[str]
    connect_timeout: NotRequired[int]


class Shared(TypedDict):
    """An inventory's sections but its nodes (a fleet's groups share them)."""
    cluster: str
    model: ModelDoc
    engine: EngineDoc
    gpu: GpuDoc
    ports: PortsDoc
    paths: PathsDoc
    ssh: SshDoc
    hf_token_env: str


class Skeleton(Shared):
    nodes: list[NodeDoc]


def engine_args(config: SizingResult) -> dict[str, float]:
    """engine.args overrides (flag without -- -> value, None removes a default flag).

    The engine builders derive the parallel layout (TP/EP/DP) from engine kind and node count
    (and vLLM's engine.executor, written beside these) and the MoE backend from moe_backend, as
    the planner does, so only what differs from their defaults is written here."""
    shape = config.launch
    if shape.static_fraction == default_static_fraction(shape.engine):
        return {}
    return {FLAGS[shape.engine]: shape.static_fraction}


def _nodes(count: int) -> list[NodeDoc]:
    public = PLACEHOLDER_PUBLIC_NET.network_address
    private = PLACEHOLDER_PRIVATE_NET.network_address
    return [
        {
            "name": f"node{i}",
            "address": str(public + 10 + i),
            "private_address": str(private + 10 + i),
            "nic": "eth0",
        }
        for i in range(count)
    ]


def skeleton_for(config: SizingResult, cluster: str | None = None) -> Skeleton:
    """An inventory dict for one sized config; rank = list order, node0 is the head.
    ValueError for a shape k3deploy does not launch (vLLM beyond two nodes)."""
    return {**shared_sections(config, cluster), "nodes": _nodes(config.nodes)}


def shared_sections(config: SizingResult, cluster: str | None = None) -> Shared:
    """skeleton_for's sections but its nodes."""
    if config.engine == "vllm" and config.nodes > VLLM_MAX_NODES:
        raise ValueError(
            f"{config.label}: k3deploy launches vLLM on at most {VLLM_MAX_NODES} nodes; "
            f"use --engine sglang for {config.nodes} nodes"
        )
    if config.engine == "vllm" and config.launch.tp > 1:
        raise ValueError(f"{config.label}: vLLM's TP{config.launch.tp} cell is shown for "
                         "comparison; k3deploy launches vLLM as DP+EP")
    # Written out, so the file says how vLLM spans its nodes (engines/layout.py).
    executor: _Executor = ({"executor": DEFAULT_EXECUTOR} if config.engine == "vllm"
                           and config.nodes > 1 else {})
    return {
        "cluster": cluster or f"k3-{config.gpu}-{config.nodes}x{config.gpus_per_node}",
        "model": {
            "repo": MODEL_REPO, "revision": "main", "endpoint": HF_ENDPOINT,
            "precision": config.precision,
        },
        "engine": {
            "kind": config.engine,
            **executor,
            "image": None,
            "container": "k3",
            "args": engine_args(config),
            "env": {},
            "context_length": config.launch.context_length or sizing.SUGGESTED_CONTEXT_LENGTH,
        },
        "gpu": {"model": config.gpu, "count": config.gpus_per_node},
        "ports": {"dist_init": 20000, "serve": 8000, "ray": 6379},
        "paths": {
            "nvme": "/mnt/nvme", "hf_home": "/mnt/nvme/hf", "docker_root": "/mnt/nvme/docker",
        },
        "ssh": {
            "user": "ubuntu", "port": 22, "key": "id_ed25519", "known_hosts": "known_hosts",
            "connect_timeout": 10,
        },
        "hf_token_env": "HF_TOKEN",
    }


def skeleton_yaml(config: SizingResult, cluster: str | None = None) -> str:
    """The skeleton as YAML text with a header saying what to replace, for writing to FILE."""
    header = [
        f"# k3deploy inventory skeleton: {config.label}, {config.precision}, {config.engine}",
        "# PLACEHOLDERS: every node address below is an RFC 5737 documentation address",
        f"# ({PLACEHOLDER_PUBLIC_NET} public, {PLACEHOLDER_PRIVATE_NET} private), routing nowhere:",
        "# replace address / private_address / nic with each node's real values, and point",
        "# ssh.key / ssh.known_hosts (relative to this file) at your key and known_hosts.",
        "# context_length: set it to your traffic maximum, not the 1,048,576 architectural max.",
    ]
    if not config.fits:
        header.append("# WARNING: this shape does not fit; `k3deploy up` will refuse it.")
    body = yaml.safe_dump(skeleton_for(config, cluster), sort_keys=False, default_flow_style=False)
    return "\n".join(header) + "\n" + body

"""Engine command lines: pure functions from a LaunchSpec to the argv a node runs.

Nothing here touches the network or the filesystem, and no secret value ever appears in a
returned argv (see spec.py for where the API key lives instead).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping

from k3deploy.engines.config_fields import FIELDS_LABEL, differences, fields_label
from k3deploy.engines.docker import (docker_exec_argv, docker_logs_argv, docker_rm_argv,
                                     vllm_env_host_path)
from k3deploy.engines.images import ImageChoiceError, inventory_image
from k3deploy.engines.layout import runs_over_ray
from k3deploy.engines.ray import ray_head_container_argv, ray_worker_container_argv
from k3deploy.engines.sglang import (sglang_launch_argv, sglang_secret_config,
                                     sglang_secret_host_path)
from k3deploy.engines.spec import CONFIG_LABEL, LaunchSpec
from k3deploy.engines.vllm import (SERVE_EXITED, serve_log_host_path, vllm_exec_serve_argv,
                                   vllm_launch_argv, vllm_secret_env, without_serve_log)

__all__ = [
    "CONFIG_LABEL", "FIELDS_LABEL", "ImageChoiceError", "LaunchSpec", "SERVE_EXITED",
    "config_changes",
    "config_digest", "docker_exec_argv", "docker_logs_argv", "docker_rm_argv", "inventory_image",
    "node_launch_argvs",
    "serve_log_host_path", "sglang_launch_argv", "sglang_secret_config",
    "sglang_secret_host_path", "uses_ray", "vllm_env_host_path", "vllm_exec_serve_argv",
    "vllm_secret_env", "with_config_label", "without_serve_log",
]


def uses_ray(spec: LaunchSpec) -> bool:
    return runs_over_ray(spec.engine, spec.nnodes, spec.executor)


def node_launch_argvs(spec: LaunchSpec) -> list[list[str]]:
    """Every command that starts this node's part of the engine, in order. With Ray the
    head's second command (vllm serve) must wait until every node has joined."""
    if spec.engine == "sglang":
        return [sglang_launch_argv(spec)]
    if not uses_ray(spec):
        return [vllm_launch_argv(spec)]
    if spec.is_head:
        return [ray_head_container_argv(spec), vllm_exec_serve_argv(spec)]
    return [ray_worker_container_argv(spec)]


def config_digest(spec: LaunchSpec, api_key: str | None = None) -> str:
    """16 hex chars of sha256 over what defines this node's running engine: the spec
    (labels aside: the digest goes there), the argvs it produces, and a sha256 of the API
    key (the key itself never enters), so a new key or image or flag changes the digest."""
    bare = dataclasses.replace(spec, labels={})
    fields = {f.name: getattr(bare, f.name) for f in dataclasses.fields(bare)}
    doc = {
        "spec": {k: dict(v) if isinstance(v, dict) else v for k, v in fields.items()},
        "argvs": node_launch_argvs(bare),
        "api_key_sha256": hashlib.sha256(api_key.encode()).hexdigest() if api_key else None,
    }
    blob = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=dict)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def with_config_label(spec: LaunchSpec, api_key: str | None = None) -> LaunchSpec:
    """The spec with `k3deploy.config=<digest>` among its labels, ready to launch; compare
    a running container's label with config_digest() to decide leave-alone vs --replace.
    FIELDS_LABEL beside it lists the settings, for config_changes()."""
    bare = dataclasses.replace(spec, labels={})
    labels = {**spec.labels, CONFIG_LABEL: config_digest(spec, api_key),
              FIELDS_LABEL: fields_label(bare, node_launch_argvs(bare))}
    return dataclasses.replace(spec, labels=labels)


def config_changes(running_labels: Mapping[str, str], spec: LaunchSpec) -> list[str]:
    """What a running container's configuration differs in from this labelled spec's."""
    return differences(running_labels.get(FIELDS_LABEL), spec.labels[FIELDS_LABEL])

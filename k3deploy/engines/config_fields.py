"""What a launch is configured with, as a container label, and the fields two of them differ in.

The config digest (CONFIG_LABEL) decides "same or different"; this label lets a refused
relaunch say which settings differ, in the inventory's words (`engine.args.max-running-requests:
unset -> 48`). It holds the LaunchSpec's fields, which never hold a secret (spec.py refuses
secret flags and variables), and a short digest of the launch commands; the API key is left
out entirely, so a change of key is named by elimination.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

from k3deploy.core.jsonvalue import JSON
from k3deploy.engines.spec import LaunchSpec

FIELDS_LABEL = "k3deploy.config.fields"
COMMAND_FIELD = "launch command"
# LaunchSpec fields under the inventory key a user changes to change them.
INVENTORY_NAMES = {
    "image": "engine.image", "container_name": "engine.container", "model_repo": "model.repo",
    "revision_sha": "model revision", "nnodes": "number of nodes", "gpus_per_node": "gpu.count",
    "head_address": "head self_ip", "self_address": "self_ip", "nic": "nic",
    "hf_cache_host_path": "paths.hf", "secrets_host_dir": "endpoint API key file dir",
    "moe_runner_backend": "moe runner backend (precision x GPU)",
    "served_model_name": "engine.served_model_name", "dist_init_port": "ports.dist_init",
    "serve_port": "ports.serve", "ray_port": "ports.ray", "executor": "engine.executor",
    "mem_fraction_static": "engine.mem_fraction_static", "dist_timeout": "engine.dist_timeout",
    "context_length": "engine.context_length", "extra_args": "engine.args",
    "extra_env": "engine.env", "compile_cache_host_dir": "compile cache dir (its key)",
    "serve_log_host_dir": "serve log dir",
    "nccl_log_host_dir": "NCCL debug file dir",
}


def config_fields(spec: LaunchSpec, argvs: list[list[str]]) -> dict[str, object]:
    """Flat {inventory name: value}: mappings spread one entry per key, labels left out."""
    out: dict[str, object] = {}
    for f in dataclasses.fields(spec):
        if f.name == "labels":
            continue
        name, value = INVENTORY_NAMES.get(f.name, f.name), getattr(spec, f.name)
        if isinstance(value, dict) or hasattr(value, "items"):
            out.update({f"{name}.{str(k).removeprefix('--')}": v for k, v in value.items()})
        elif value is not None:
            out[name] = value
    blob = json.dumps(argvs, separators=(",", ":"))
    out[COMMAND_FIELD] = hashlib.sha256(blob.encode()).hexdigest()[:12]
    return out


def fields_label(spec: LaunchSpec, argvs: list[list[str]]) -> str:
    return json.dumps(config_fields(spec, argvs), sort_keys=True, separators=(",", ":"))


def _shown(fields: dict[str, JSON], key: str) -> str:
    return json.dumps(fields[key]) if key in fields else "unset"


def differences(running: str | None, wanted: str) -> list[str]:
    """`name: old -> new` for each field that differs between two labels; a running
    container without the label (started by an older k3deploy) is said so."""
    try:
        old = json.loads(running) if running else None
    except ValueError:
        old = None
    if not isinstance(old, dict):
        return ["its labels do not list its settings (started before k3deploy labelled them)"]
    new = json.loads(wanted)
    changed = [k for k in sorted(old.keys() | new.keys()) if old.get(k, ...) != new.get(k, ...)]
    if changed == [COMMAND_FIELD]:
        return ["the engine command k3deploy builds from these same settings (k3deploy changed)"]
    lines = [f"{k}: {_shown(old, k)} -> {_shown(new, k)}" for k in changed if k != COMMAND_FIELD]
    return lines or ["the endpoint API key"]

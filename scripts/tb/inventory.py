"""DIR/inventory.yaml: a k3deploy inventory for exactly this testbed (docs/architecture.md).

Written without PyYAML so the testbed runs on any python3; JSON scalars are valid YAML.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from tb.nodefs import SHARED_HF_HOME
from tb.nodespec import NodeSpec
from tb.sshcmd import KEY_FILE, KNOWN_HOSTS_FILE

INVENTORY_FILE = "inventory.yaml"
ENGINES = ("sglang", "vllm")


def _flow(mapping: dict) -> str:
    return "{" + ", ".join(f"{key}: {_scalar(value)}" for key, value in mapping.items()) + "}"


def _scalar(value) -> str:
    if isinstance(value, str) and value.replace("-", "").replace("_", "").replace(".", "") \
            .replace("/", "").isalnum() and not _looks_special(value):
        return value
    return json.dumps(value)


def _looks_special(text: str) -> bool:
    # Words YAML would read as something other than a string, and numbers.
    if text.lower() in ("null", "true", "false", "yes", "no", "on", "off", "~"):
        return True
    try:
        float(text)
        return True
    except ValueError:
        return False


def render(cluster: str, endpoint: str, gpu: str, gpus_per_node: int, engine: str,
           nodes: list[tuple[NodeSpec, str]], shared_hf: bool = False,
           gateway: dict | None = None) -> str:
    """nodes: (spec, address) in rank order. shared_hf: the HF cache is the testbed's one
    shared directory (`up --shared-hf`), k3deploy's download.shared. gateway (tb/gateway.py
    record, `up --ssh-gateway`): each node's SSH endpoint is the gateway's address and the
    node's port there; its own address stays its private address."""
    hf_home = SHARED_HF_HOME if shared_hf else "/mnt/nvme/hf"
    lines = [
        f"cluster: {cluster}",
        "model: " + _flow({"repo": "moonshotai/Kimi-K3", "revision": "main",
                           "endpoint": endpoint, "precision": "mxfp4"}),
        "engine:",
        f"  kind: {engine}",
        "  image: null",
        "  container: k3",
        "  args: {}",
        "  env: {}",
        "  context_length: 131072",
        "gpu: " + _flow({"model": gpu, "count": gpus_per_node}),
        "ports: {dist_init: 20000, serve: 8000, ray: 6379}",
        # The stand-in image weighs nothing, so no room is kept for a 13 GB one.
        f"paths: {{nvme: /mnt/nvme, hf_home: {hf_home}, docker_root: /mnt/nvme/docker, "
        "reserve_gb: 0.05, image_gb: 0}",
        *(["download: {shared: true}"] if shared_hf else []),
        # The nodes' veth links run at full rate within milliseconds: one second per round.
        "fabric: {seconds: 1}",
        "ssh: " + _flow({"user": "root", "port": 22, "key": KEY_FILE, "known_hosts": KNOWN_HOSTS_FILE,
                         "connect_timeout": 5}),
        "hf_token_env: HF_TOKEN",
        "nodes:",
    ]
    for spec, address in nodes:
        entry = {"name": spec.name, "address": address, "private_address": address, "nic": "eth0"}
        if gateway:
            entry.update(address=gateway["address"], port=gateway["ports"][spec.name])
        if spec.user != "root":
            entry["user"] = spec.user
        lines.append("  - " + _flow(entry))
    return "\n".join(lines) + "\n"


def write(tb_dir: Path, text: str) -> Path:
    path = Path(tb_dir) / INVENTORY_FILE
    tmp = path.with_name(f".{INVENTORY_FILE}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path

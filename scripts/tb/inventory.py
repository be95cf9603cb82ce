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
# The router image the docker stand-in runs as the real SMG (standins/engine/router.py), the
# version pyproject.toml installs; SMG's own default port. Checks every second: the testbed's
# workers answer at once, and tests/testbed/test_router_smg.py measured SMG at that interval.
ROUTER_IMAGE, ROUTER_PORT = "lightseekorg/smg:1.13.0", 30000


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
           gateway: dict | None = None, groups: int = 1) -> str:
    """nodes: (spec, address) in rank order. shared_hf: the HF cache is the testbed's one
    shared directory (`up --shared-hf`), k3deploy's download.shared. gateway (tb/gateway.py
    record, `up --ssh-gateway`): each node's SSH endpoint is the gateway's address and the
    node's port there; its own address stays its private address. groups > 1: a fleet
    inventory of that many groups (`up --groups`)."""
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
    ]
    entries = [_node_entry(spec, address, gateway) for spec, address in nodes]
    if groups > 1:
        lines += _fleet_lines(entries, groups)
    else:
        lines += ["nodes:", *(f"  - {_flow(e)}" for e in entries)]
    return "\n".join(lines) + "\n"


def _node_entry(spec: NodeSpec, address: str, gateway: dict | None) -> dict:
    entry = {"name": spec.name, "address": address, "private_address": address, "nic": "eth0"}
    if gateway:
        entry.update(address=gateway["address"], port=gateway["ports"][spec.name])
    if spec.user != "root":
        entry["user"] = spec.user
    return entry


def _fleet_lines(entries: list[dict], groups: int) -> list[str]:
    """`up --groups N`: k3deploy's fleet shape (docs/inventory.md, "Fleet"): the nodes in N
    equal groups in order, the router (the real SMG, the image the docker stand-in runs) on
    the first group's head."""
    size = len(entries) // groups
    lines = ["router: " + _flow({"node": entries[0]["name"], "port": ROUTER_PORT,
                                 "image": ROUTER_IMAGE, "health_check_interval": 1}),
             "groups:"]
    for g in range(groups):
        lines += [f"  - name: g{g}", "    nodes:"]
        lines += [f"      - {_flow(e)}" for e in entries[g * size:(g + 1) * size]]
    return lines


def write(tb_dir: Path, text: str) -> Path:
    path = Path(tb_dir) / INVENTORY_FILE
    tmp = path.with_name(f".{INVENTORY_FILE}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path

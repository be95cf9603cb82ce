"""The inventory `k3deploy init` writes: the planner's config for the GPUs found (the guide's
reference config for that shape when there is one), the skeleton of `plan --emit-inventory`
(cluster/inventory_skeleton.py) with the hosts' real values put in, and comments saying what
was found and what to check."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from k3deploy.cli.init_findings import Host, common, summary
from k3deploy.cluster import sizing
from k3deploy.cluster.inventory_skeleton import HF_ENDPOINT, NodeDoc, Skeleton, SshDoc, skeleton_for
from k3deploy.cluster.sizing import SizingResult
from k3deploy.engines.images import ImageChoiceError, choose_image
from k3deploy.node.private_net import Choice
from k3deploy.remote import protocol


@dataclass(frozen=True)
class Access:
    """How the hosts were logged in to, as the inventory will say it."""
    port: int | None
    key: str | None
    known_hosts: str | None     # None: the default (~/.ssh/known_hosts), left unsaid
    hub_endpoint: str | None


def pick_config(gpu: str, nodes: int, per_node: int) -> SizingResult:
    """The guide's reference config for exactly this shape, else the planner's first
    precision that fits this shape (the first at all when none fits: the header says so)."""
    for ref in sizing.REFERENCE_CONFIGS:
        if (ref.gpu, ref.nodes, ref.gpus_per_node) == (gpu, nodes, per_node):
            return sizing.size_config(ref.gpu, ref.nodes, ref.gpus_per_node, ref.precision,
                                      engine=ref.engine, label=ref.label)
    results = sizing.plan(gpu=gpu, nodes=nodes, gpus_per_node=per_node)
    return next((r for r in results if r.fits), results[0])


def _path_for(path: str, out_dir: Path) -> str:
    """The inventory resolves ssh paths relative to its own file: relative when the file is
    beside it or below (they move together), absolute otherwise."""
    full = os.path.abspath(os.path.expanduser(path))
    rel = os.path.relpath(full, out_dir)
    return full if rel.startswith("..") else rel


def _node(host: Host, choice: Choice, ssh_port: int) -> NodeDoc:
    node: NodeDoc = {"name": host.name, "address": host.address, "private_address": choice.address,
            "nic": choice.nic}
    if host.port is not None and host.port != ssh_port:   # behind a gateway: a port each
        node["port"] = host.port
    return node


def inventory(config: SizingResult, hosts: list[Host], chosen: dict[str, Choice],
              access: Access, out_dir: Path, cluster: str | None) -> Skeleton:
    doc = skeleton_for(config, cluster)
    doc["model"]["endpoint"] = access.hub_endpoint or HF_ENDPOINT
    targets = [h.disk.mount.target for h in hosts if h.disk]
    nvme = common(targets) if targets else "/mnt/nvme"
    doc["paths"] = {"nvme": nvme, "hf_home": protocol.default_hf_home(nvme),
                    "docker_root": protocol.default_docker_root(nvme)}
    ssh: SshDoc = {"user": common([h.user for h in hosts]), "port": access.port or 22}
    if access.key:
        ssh["key"] = _path_for(access.key, out_dir)
    if access.known_hosts:
        ssh["known_hosts"] = _path_for(access.known_hosts, out_dir)
    ssh["connect_timeout"] = 10
    doc["ssh"] = ssh
    doc["nodes"] = [_node(h, chosen[h.name], ssh["port"]) for h in hosts]
    return doc


def _image_note(config: SizingResult, hosts: list[Host]) -> str:
    cudas = sorted({h.cuda for h in hosts if h.cuda})
    try:
        images = sorted({choose_image(config.engine, c) for c in cudas})
    except ImageChoiceError as err:
        return f"image: null, but {err}"
    return (f"image: null -> {', '.join(images)} for the drivers' CUDA {', '.join(cudas)} "
            "(chosen per node by `up`; pin a tag or digest for production)")


def header(config: SizingResult, hosts: list[Host], notes: list[str], problems: list[str],
           argv: list[str]) -> list[str]:
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [f"written by `k3deploy init {' '.join(argv)}` on {when}; nothing was changed "
             "on the hosts",
             f"config: {config.label}, {config.precision}, {config.engine} (the planner's "
             f"{'reference config' if _is_reference(config) else 'first fitting precision'} "
             f"for {config.nodes} x {config.gpus_per_node} {config.gpu}); "
             f"`k3deploy plan --gpu {config.gpu} --nodes {config.nodes}` shows the arithmetic",
             _image_note(config, hosts)]
    if not config.fits:
        lines.append("WARNING: this shape does not fit the checkpoint; `k3deploy up` will refuse it")
    lines += [f"rank {rank} {h.name} ({h.endpoint}): {summary(h)}" for rank, h in enumerate(hosts)]
    lines += notes
    lines += [f"PROBLEM: {p}" for p in problems]
    lines += ["CHECK: engine.context_length (your traffic's longest request), model.endpoint "
              "(huggingface.co or your mirror), price: {per_gpu_hour: ..} (optional, for cost)",
              "ranks follow the order the hosts were given; rank 0 (the first) is the head"]
    return [f"# {line}" for line in lines]


def _is_reference(config: SizingResult) -> bool:
    return any((r.label, r.precision, r.engine) == (config.label, config.precision, config.engine)
               for r in sizing.REFERENCE_CONFIGS)


def render(doc: Skeleton, head: list[str]) -> str:
    nodes = doc["nodes"]
    sections = {k: v for k, v in doc.items() if k != "nodes"}
    body = yaml.safe_dump(sections, sort_keys=False, default_flow_style=False, width=100)
    rows = [f"  - {yaml.safe_dump(n, default_flow_style=True, sort_keys=False, width=1000).strip()}"
            for n in nodes]
    return "\n".join(head) + "\n" + body + "nodes:   # rank = list order\n" + "\n".join(rows) + "\n"

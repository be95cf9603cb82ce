"""preflight: read-only checks on every node; every problem on every node in one table,
before anything is changed."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from k3deploy.node import run_settle
from k3deploy.node import facts as F
from k3deploy.node.context import NodeContext, RunContext
from k3deploy.node.host_facts import Route
from k3deploy.cluster import gpus as gpu_table
from k3deploy.cluster import sizing
from k3deploy.core.errors import K3Error
from k3deploy.core.jsonvalue import JSON
from k3deploy.engines import ImageChoiceError, inventory_image
from k3deploy.core.units import GB
from k3deploy.facts.docker import Container
from k3deploy.facts.dockerd import GpuHooks
from k3deploy.facts.fabric import IbPort
from k3deploy.facts.gpudirect import DmaBuf
from k3deploy.facts.http import Endpoint
from k3deploy.facts.nvidia_smi import Gpu, LostGpu
from k3deploy.facts.reach import Mesh, NotRun, Reach
from k3deploy.facts.topology import Topology
from k3deploy.remote import protocol
from k3deploy.steps import probes
from k3deploy.steps.disks import docker_host
from k3deploy.steps.fabric import fabric_check, fabric_topology
from k3deploy.steps.checks import hubreach
from k3deploy.steps.weights import shared_hf
from k3deploy.steps.base import AnyFact, ClusterProbe, Step, settled
from k3deploy.steps.checks.reachability import (NOT_PROBED, TCP_TABLES, mesh_probes, ports_in_use,
                                         reachability_problems, serving, serving_facts)
from k3deploy.steps.checks.sameness import undeclared_problems


@dataclass(frozen=True)
class PreflightFacts:
    """Every probe of `Preflight.probes` by its name; the ones some nodes or runs only ask
    (the head's /health and shared volume, the Hub's reach, a shared cache's marker, the route
    to a peer) and what the runner's cluster look adds (the port mesh's answer, the GPU-to-HCA
    layout) default to None."""
    gpus: tuple[Gpu, ...] | None
    gpus_lost: tuple[LostGpu, ...]
    cuda: str | None
    driver: str | None
    docker: str | None                  # docker info's ServerVersion; None: no daemon
    gpu_hooks: GpuHooks
    driver_status: str | None
    system_containerd: bool
    containerd_toml: str
    hub_client: str | None              # huggingface_hub's version
    nic: str | None                     # `ip -o -4 addr show dev NIC`
    free_bytes: int | None
    have_bytes: int | None
    sudo: bool
    ports_in_use: frozenset[int]
    container: Container | None
    ib_ports: tuple[IbPort, ...] | None
    ib_devices: tuple[str, ...] | None
    gpudirect_rdma: bool
    gpu_dmabuf: DmaBuf | None = None     # facts/gpudirect.py (steps/fabric/fabric_check.facts)
    serving: Endpoint | None = None
    hub_reach: tuple[Reach, ...] | None = None
    shared_marker: str | None = None
    volume_free_bytes: int | None = None
    route_to_peer: Route | None = None
    mesh: Mesh | NotRun | K3Error | None = None
    gpu_nic_topology: Topology | K3Error | None = None


def _facts(node: NodeContext) -> list[AnyFact]:
    inv, n = node.inv, node.node
    return [
        probes.gpus(), probes.lost_gpus(), probes.cuda(), probes.driver(),
        probes.docker_info("docker", "ServerVersion"), docker_host.gpu_hooks(),
        *docker_host.image_store_facts(),
        F.python("hub_client", "import huggingface_hub as h; print(h.__version__)", [], F.text),
        F.command("nic", ["ip", "-o", "-4", "addr", "show", "dev", n.nic], F.text),
        F.native("free_bytes", "avail_bytes", [inv.paths.nvme], F.integer),
        F.Fact("have_bytes", f"du -sbL {shlex.quote(protocol.blobs_dir(inv.model_cache))} 2>/dev/null "
               "|| echo 0", F.integer),
        F.native("sudo", "root_or_sudo", [], F.exit_ok),
        F.native("ports_in_use", "cat_quiet", list(TCP_TABLES), ports_in_use),
    ]


class Preflight(Step[PreflightFacts]):
    name = "preflight"
    read_only = True
    Facts = PreflightFacts

    def gate(self, run: RunContext) -> None:
        run_settle.hub_reach(run)

    def prepare(self, run: RunContext) -> None:
        run_settle.manifest(run)

    def probes(self, node: NodeContext) -> list[AnyFact]:
        volume = shared_hf.volume_free_fact(node.inv) if node.is_head else []
        return (_facts(node) + serving_facts(node) + hubreach.facts(node)
                + shared_hf.marker_fact(node.inv) + volume + fabric_check.facts(node))

    def problems(self, facts: PreflightFacts, node: NodeContext) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        for check in (_gpu_problems, _software_problems, _network_problems, _disk_problems,
                      hubreach.problems, fabric_check.problems):
            out += check(facts, node)
        return out

    def cluster_probes(self, all_facts: dict[str, PreflightFacts],
                       run: RunContext) -> dict[str, ClusterProbe | tuple[ClusterProbe, ...]]:
        """The port mesh, then the GPU-to-HCA layout: both only before a launch."""
        mesh = mesh_probes(run, all_facts)
        topo = fabric_topology.probes_before_launch(run, list(all_facts), serving(run, all_facts))
        return {n: tuple(p for p in (mesh.get(n), topo.get(n)) if p) for n in all_facts
                if n in mesh or n in topo}

    def cluster_problems(self, all_facts: dict[str, PreflightFacts],
                         run: RunContext) -> list[tuple[str, str, str]]:
        return (_unchecked(all_facts, run) + undeclared_problems(all_facts) + _sizing(run)
                + shared_hf.marker_problems(all_facts, run) + reachability_problems(run, all_facts)
                + fabric_check.cluster_problems(all_facts, run)
                + fabric_topology.unread(all_facts))

    def closing_lines(self, run: RunContext, all_facts: dict[str, PreflightFacts]) -> list[str]:
        return ([NOT_PROBED] if serving(run, all_facts) else []) + fabric_check.warnings(
            all_facts, run)

    def detail(self, facts: PreflightFacts, node: NodeContext) -> dict[str, JSON] | None:
        return {"gpus": len(facts.gpus or ()), "cuda": facts.cuda,
                "free_gb": round((facts.free_bytes or 0) / GB, 1)}

    def cluster_detail(self, all_facts: dict[str, PreflightFacts],
                       run: RunContext) -> dict[str, JSON] | None:
        """Each node's GPU-to-HCA layout, kept on the head (asked before a launch only)."""
        found: dict[str, JSON] = {n: fabric_topology.summary(t) for n, f in all_facts.items()
                                  if (t := fabric_topology.layout(f))}
        return {"gpu_nic": found} if found else None


def _gpu_problems(facts: PreflightFacts, node: NodeContext) -> list[tuple[str, str]]:
    inv, gpus = node.inv, facts.gpus
    if facts.gpus_lost:   # nvidia-smi then answers nothing else: one finding per GPU
        return probes.lost_gpu_problems(facts.gpus_lost, "gpus")
    if gpus is None:
        return [("gpus", "nvidia-smi failed or is missing; install the NVIDIA driver")]
    out = []
    if len(gpus) != inv.gpu.count:
        out.append(("gpus", f"{len(gpus)} GPUs, the inventory expects {inv.gpu.count}: every "
                    "rank loads the same shard layout, a mismatched node fails the group; "
                    "check `nvidia-smi -L` (a GPU that fell off the bus needs a reboot) or "
                    "replace the node"))
    models = {(gpu_table.match_smi_name(g.name) or gpu_table.GpuModel(
        "?", g.name, 0, False, (), "")).key for g in gpus}
    if gpus and models != {inv.gpu.model}:
        names = sorted({g.name for g in gpus})
        out.append(("gpus", f"GPU model {', '.join(names)}; the inventory expects {inv.gpu.model}"))
    try:
        inventory_image(inv, facts.cuda)
    except ImageChoiceError as err:
        out.append(("cuda", str(err)))
    return out


def _software_problems(facts: PreflightFacts, node: NodeContext) -> list[tuple[str, str]]:
    out = []
    if not facts.sudo:
        out.append(("sudo", f"user {node.conn.ep.user} cannot sudo without a password; "
                    "k3deploy needs root or passwordless sudo"))
    if facts.docker is None:
        out.append(("docker", "docker is missing or its daemon does not answer "
                    "(sudo systemctl start docker)"))
    else:
        problems = [docker_host.gpu_access_problem(facts.gpu_hooks, facts.docker),
                    docker_host.image_store_problem(facts, node.inv.paths)]
        out += [("docker", p) for p in problems if p]
    hub = facts.hub_client
    if hub is None:
        out.append(("python", "python3 with huggingface_hub is missing on the node "
                    "(python3 -m pip install --user 'huggingface_hub>=1.0')"))
    elif hub.split(".")[0].isdigit() and int(hub.split(".")[0]) < 1:
        # remote/fetch_weights.py uses the 1.x HTTP client; 0.x would fail every file.
        out.append(("python", f"huggingface_hub {hub} is too old on the node "
                    "(python3 -m pip install --user --upgrade 'huggingface_hub>=1.0')"))
    return out


def _network_problems(facts: PreflightFacts, node: NodeContext) -> list[tuple[str, str]]:
    n, text = node.node, facts.nic
    if not text:
        return [("nic", f"interface {n.nic} does not exist or has no IPv4 address; set nodes[].nic "
                 "to the interface that carries the private address (ip -br addr)")]
    if f" {n.self_ip}/" not in text:
        return [("nic", f"{n.nic} does not carry {n.self_ip}: NCCL/GLOO would bind the wrong "
                 "interface; fix nodes[].nic or nodes[].private_address")]
    return []


def _disk_problems(facts: PreflightFacts, node: NodeContext) -> list[tuple[str, str]]:
    free = facts.free_bytes
    if free is None:
        return [("disk", f"{node.inv.paths.nvme} does not exist on this node; mount the NVMe "
                 "there or set paths.nvme")]
    if shared_hf.shared(node.inv):   # the checkpoint goes to the shared volume, not the NVMe
        return _reserve_problems(free, facts, node) + (
            _volume_problems(facts, node) if node.is_head else [])
    image, manifest = _image_budget(facts, node), settled(node.run.inputs.manifest, "manifest")
    need = manifest.total_bytes * 1.02 + image + node.inv.paths.reserve_gb * GB
    have = facts.have_bytes or 0
    if free + have < need:
        return [("disk", f"{free / GB:,.2f} GB free on {node.inv.paths.nvme} + {have / GB:,.2f} GB "
                 f"already downloaded < {need / GB:,.2f} GB needed (checkpoint "
                 f"{manifest.total_bytes / GB:,.2f} GB + 2% + {image / GB:,.2f} GB for the image "
                 f"in this node's image store + {node.inv.paths.reserve_gb} GB kept free); free "
                 "space there or mount a larger NVMe (paths.nvme)")]
    return []


def _image_budget(facts: PreflightFacts, node: NodeContext) -> float:
    """The image's disk on the NVMe (the nvme step puts data-root, or a system containerd's
    root, there)."""
    return docker_host.image_disk_bytes(node.inv.paths.image_gb * GB, facts.driver_status)


def _reserve_problems(free: int, facts: PreflightFacts,
                      node: NodeContext) -> list[tuple[str, str]]:
    need = node.inv.paths.reserve_gb * GB + _image_budget(facts, node)
    if free >= need:
        return []
    return [("disk", f"{free / GB:,.2f} GB free on {node.inv.paths.nvme} < {need / GB:,.2f} GB "
             "kept for the image in this node's image store and logs (paths.image_gb, "
             "paths.reserve_gb); free space there")]


def _volume_problems(facts: PreflightFacts, node: NodeContext) -> list[tuple[str, str]]:
    free, have = facts.volume_free_bytes, facts.have_bytes or 0
    need = settled(node.run.inputs.manifest, "manifest").total_bytes * 1.02
    if free is None or free + have >= need:
        return []
    return [("disk", f"{free / GB:,.2f} GB free on the shared volume ({node.inv.paths.hf}) + "
             f"{have / GB:,.2f} GB already downloaded < {need / GB:,.2f} GB needed (checkpoint "
             "+ 2%); free space there or use a larger volume")]


def _unchecked(all_facts: dict[str, PreflightFacts], run: RunContext) -> list[tuple[str, str, str]]:
    """A node preflight could not look at is a problem, not a pass: it stops the bring-up
    before anything changes on the others, since launch needs every node anyway."""
    return [(n.name, "reachable", "could not be checked (see the error above); a bring-up "
             "needs every node: bring it back or replace it in the inventory, then re-run")
            for n in run.inv.nodes if n.name not in all_facts]


def _sizing(run: RunContext) -> list[tuple[str, str, str]]:
    ok, message = sizing.fits_inventory_of(run.inv)
    return [] if ok else [("cluster", "sizing", message)]

"""The inventory: what the cluster is, validated completely before any SSH.

Shape: docs/architecture.md. Values that end up in a remote command are constrained by
pattern here, so the rest of the code can rely on them (they are still shlex-quoted).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal, overload

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from k3deploy.core.errors import FleetNotSupported, InventoryError
from k3deploy.cluster.inventory_partial import partial
from k3deploy.cluster.moe_backend import moe_runner_backend
from k3deploy.engines.static_fraction import SGLANG_MEM_FRACTION_STATIC
from k3deploy.cluster.inventory_rules import semantic_problems
from k3deploy.remote import protocol

Name = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9-]{0,40}$")]
User = Annotated[str, StringConstraints(pattern=r"^[a-z_][a-z0-9_-]{0,31}$")]
Host = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9.:-]{0,252}$")]
Nic = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]{1,15}$")]
AbsPath = Annotated[str, StringConstraints(pattern=r"^/[A-Za-z0-9._/-]*$")]
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")]
FlagName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9-]{0,63}$")]
Image = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9./_:@-]{0,254}$")]
RepoId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._-]+/[A-Za-z0-9._-]+$")]
Revision = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._/-]{1,100}$")]
# A value may hold spaces (it is quoted) but never a newline or NUL: those end a shell line.
SafeValue = Annotated[str, StringConstraints(pattern=r"^[^\n\r\x00]*$")]
GpuKind = Literal["h100", "h200", "b200", "b300", "gb200"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSpec(_Model):
    repo: RepoId = "moonshotai/Kimi-K3"
    revision: Revision = "main"
    endpoint: Annotated[str, StringConstraints(pattern=r"^https?://[^\s]+$")] | None = None
    precision: Literal["mxfp4", "mxfp8", "bf16"] = "mxfp4"


class EngineSpec(_Model):
    kind: Literal["sglang", "vllm"] = "sglang"
    image: Image | None = None
    container: Name = "k3"
    args: dict[FlagName, SafeValue | int | float | bool | None] = Field(default_factory=dict)
    env: dict[EnvName, SafeValue | int | float] = Field(default_factory=dict)
    context_length: int | None = Field(default=131072, ge=1024, le=1048576)
    mem_fraction_static: float = Field(default=SGLANG_MEM_FRACTION_STATIC, gt=0.1, le=0.98)
    dist_timeout: int = Field(default=3600, ge=60)
    api_key_env: EnvName | None = None
    require_api_key: bool = True
    # auto: InfiniBand into the containers when the node has an HCA with an active port;
    # ib: required (a node without one is a preflight error); socket: NCCL_IB_DISABLE=1
    fabric: Literal["auto", "ib", "socket"] = "auto"
    # Multi-node vLLM only: mp, vLLM's own multiprocessing executor (one `vllm serve` per node,
    # the API node first, --headless on the others: docs/serving/data_parallel_deployment.md),
    # or ray (a Ray cluster, the head's serve starting every rank). None: mp.
    executor: Literal["mp", "ray"] | None = None


class GpuSpec(_Model):
    model: GpuKind = "h100"
    count: int = Field(default=8, ge=1, le=72)


class Ports(_Model):
    dist_init: int = Field(default=20000, ge=1, le=65535)
    serve: int = Field(default=8000, ge=1, le=65535)
    ray: int = Field(default=6379, ge=1, le=65535)
    peer: int = Field(default=8951, ge=1, le=65535)   # node-to-node weight fan-out
    guard: int = Field(default=8952, ge=1, le=65535)
    mesh: int = Field(default=8953, ge=1, le=65535)   # the fabric mesh's receivers (check --fabric)


class FabricSpec(_Model):
    """The pairwise throughput mesh (steps/fabric/fabric_mesh.py)."""
    seconds: float = Field(default=3.0, ge=1, le=60)   # each round's measuring time
    min_gbps: float | None = Field(default=None, gt=0)  # a link under this is slow, whatever the median


class GuardSpec(_Model):
    """The serve-time guard (steps/guard.py): fail-stop of the whole group when a rank dies."""
    enabled: bool = True
    peer_timeout: float = Field(default=20, ge=3, le=3600)  # a silent guard this long: failed
    poll_seconds: float = Field(default=1.0, ge=0.2, le=60)
    stop_grace: int = Field(default=30, ge=1, le=600)  # docker stop -t: SIGTERM, then SIGKILL
    # Work outstanding and no rank advancing this long: the group is wedged (remote/guard_wedge.py).
    wedge_seconds: float = Field(default=60, ge=5, le=3600)


class Paths(_Model):
    nvme: AbsPath = "/mnt/nvme"
    hf_home: AbsPath | None = None
    docker_root: AbsPath | None = None
    # Room kept free beyond the checkpoint and the engine image: logs, the compile caches.
    reserve_gb: float = Field(default=7.0, ge=0)
    # What a pull of the engine image moves (compressed; the guide: "about 13GB"); the disk it
    # takes depends on the node's image store (steps/docker_host.image_disk_bytes).
    image_gb: float = Field(default=13.0, ge=0)

    # The defaults under the NVMe mount are node path rules: remote/protocol.py holds them all.
    @property
    def hf(self) -> str:
        return self.hf_home or protocol.default_hf_home(self.nvme)

    @property
    def docker(self) -> str:
        return self.docker_root or protocol.default_docker_root(self.nvme)

    @property
    def containerd(self) -> str:
        """containerd's root (not configurable: it follows the NVMe mount)."""
        return protocol.containerd_root(self.nvme)

    @property
    def work(self) -> str:
        """k3deploy's own files on the node (downloader, manifests, secrets, logs)."""
        return protocol.work_dir(self.nvme)


class DownloadSpec(_Model):
    # null: on when the cluster has more than one node (k3deploy.cluster.fanout.peers_enabled)
    peers: bool | None = None
    # paths.hf_home is one volume every node mounts at that path (the guide's shared-volume
    # option): the head downloads, the others wait and verify; no fan-out (steps/weights/shared_hf.py)
    shared: bool = False
    # A file fails only after this long without a new byte (the Hub's 5xx/429 minutes are
    # waited out); the laptop then restarts a downloader that died of that, a few times.
    retry_minutes: float = Field(default=15, gt=0, le=24 * 60)
    # Hub connections per node, shared by the files in flight. CDN edges cap each one (~68 MB/s
    # fast, ~70% of them 8.7 MB/s: huggingface/xet-core#821), so a 25 Gbit/s link needs 46 fast
    # ones; slow ones are replaced, and churn costs a few more (scripts/bench --hub-cdn).
    connections: int = Field(default=96, ge=1, le=256)
    # Bytes per ranged request, in MiB: a request's first-byte wait is paid once per range, a
    # slow edge holds at most one range. 32 MiB is what the Hub's own client asks the bridge
    # for (huggingface/xet-core#821: Content-Range spans of 33554432 bytes on 17 GB shards).
    segment_mib: float = Field(default=32, ge=0.0625, le=1024)


class SshSpec(_Model):
    user: User | None = None
    port: int | None = Field(default=None, ge=1, le=65535)
    key: str | None = None
    known_hosts: str | None = None
    connect_timeout: float = Field(default=10, gt=0, le=300)
    command_timeout: float = Field(default=600, gt=0)
    use_ssh_config: bool = True


class PriceSpec(_Model):
    per_gpu_hour: float = Field(gt=0)
    currency: Annotated[str, StringConstraints(pattern=r"^[A-Z]{3}$")] = "USD"


class Node(_Model):
    name: Name
    address: Host
    private_address: Host | None = None
    nic: Nic = "eth0"
    user: User | None = None
    port: int | None = Field(default=None, ge=1, le=65535)
    key: str | None = None
    rank: int | None = Field(default=None, ge=0)

    @property
    def self_ip(self) -> str:
        return self.private_address or self.address


class Inventory(_Model):
    cluster: Name
    model: ModelSpec = ModelSpec()
    engine: EngineSpec = EngineSpec()
    gpu: GpuSpec = GpuSpec()
    ports: Ports = Ports()
    guard: GuardSpec = GuardSpec()
    fabric: FabricSpec = FabricSpec()
    paths: Paths = Paths()
    download: DownloadSpec = DownloadSpec()
    ssh: SshSpec = SshSpec()
    hf_token_env: EnvName = "HF_TOKEN"
    price: PriceSpec | None = None
    nodes: list[Node] = Field(min_length=1)
    source: str = Field(default="<memory>", exclude=True)

    def ranked(self) -> list[tuple[int, Node]]:
        """(rank, node) pairs, head first."""
        pairs = [(n.rank if n.rank is not None else i, n) for i, n in enumerate(self.nodes)]
        return sorted(pairs, key=lambda p: p[0])

    def rank_of(self, name: str) -> int:
        return next(r for r, n in self.ranked() if n.name == name)

    @property
    def head(self) -> Node:
        """Rank 0: the one accessor for "the head" (is_head asks it)."""
        return self.ranked()[0][1]

    def is_head(self, name: str) -> bool:
        return name == self.head.name

    @property
    def moe_runner_backend(self) -> str | None:
        """The MoE backend the launch passes (the planner reports the same one)."""
        return moe_runner_backend(self.engine.kind, self.gpu.model, self.model.precision)

    @property
    def model_cache(self) -> str:
        """The model's folder in the HF cache on every node (remote/protocol.py's layout)."""
        return protocol.cache_storage(self.paths.hf, self.model.repo)

    @property
    def total_gpus(self) -> int:
        return self.gpu.count * len(self.nodes)

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def behind_gateway(self, node: Node) -> bool:
        """The node's SSH address is another node's too: one gateway host with a port per
        machine, which forwards those ports and nothing else to the node."""
        return any(n is not node and n.address.lower() == node.address.lower() for n in self.nodes)

    @overload
    def resolve_path(self, value: str) -> str: ...
    @overload
    def resolve_path(self, value: str | None) -> str | None: ...
    def resolve_path(self, value: str | None) -> str | None:
        """Paths in the inventory are relative to the inventory file."""
        if value is None:
            return None
        path = Path(os.path.expanduser(value))
        if not path.is_absolute() and self.source != "<memory>":
            path = Path(self.source).parent / path
        return str(path)


def _format_pydantic(err: ValidationError) -> list[str]:
    problems = []
    for e in err.errors():
        loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e["loc"]).lstrip(".")
        msg = e["msg"]
        if e["type"] == "string_pattern_mismatch":
            msg = f"{e['input']!r} is not allowed here (must match {e['ctx']['pattern']})"
        elif e["type"] == "extra_forbidden":
            msg = "unknown field (check the spelling; see inventories/ for examples)"
        problems.append(f"{loc or '<top>'}: {msg}")
    return problems


def parse(data: object, source: str = "<memory>") -> Inventory:
    """Validate a loaded document; raise InventoryError with every problem at once."""
    if not isinstance(data, dict):
        raise InventoryError(source, ["<top>: the inventory must be a YAML mapping"])
    if "groups" in data:  # the one place every command that runs one group learns it is a fleet
        raise FleetNotSupported(source, data["groups"])
    try:
        inv = Inventory.model_validate({**data, "source": source})
    except ValidationError as err:
        # The cross-field rules still run on what did parse: every problem in one run.
        rest = semantic_problems(partial(Inventory, {**data, "source": source}))
        raise InventoryError(source, _format_pydantic(err) + rest) from None
    problems = semantic_problems(inv)
    if problems:
        raise InventoryError(source, problems)
    return inv


def load_document(path: str) -> object:
    """The YAML document at PATH, not yet validated."""
    try:
        with open(path, encoding="utf-8") as fh:
            return yaml.safe_load(fh)
    except FileNotFoundError:
        raise InventoryError(path, ["file not found"]) from None
    except yaml.YAMLError as err:
        raise InventoryError(path, [f"not valid YAML: {err}"]) from None


def load(path: str | os.PathLike[str]) -> Inventory:
    path = str(path)
    return parse(load_document(path), source=path)

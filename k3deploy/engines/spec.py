"""LaunchSpec: everything one node needs to start its engine, and the flag merger.

The spec never holds a secret. The API key lives in a 0600 file in `secrets_host_dir`
on the node; builders only ever name that file.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from collections.abc import Mapping

from k3deploy.engines.inventory_view import FlagValue as FlagValue  # the argv builders import it from here
from k3deploy.engines.layout import EXECUTORS
from k3deploy.engines.static_fraction import SGLANG_MEM_FRACTION_STATIC

ENGINES = ("sglang", "vllm")
# tp-ep: the guide's multi-node SGLang cell; dp-attention: its single-node B300 SGLang
# cell; dp-ep: vLLM data parallel + expert parallel (one node, or several: mp or Ray).
LAYOUTS = {"tp-ep": "sglang", "dp-attention": "sglang", "dp-ep": "vllm"}

HF_CACHE_MOUNT = "/root/.cache/huggingface"
SECRETS_MOUNT = "/k3deploy/secrets"
SGLANG_SECRET_FILE = "sglang-secret.yaml"
VLLM_ENV_FILE = "vllm.env"
SERVE_LOG_MOUNT = "/k3deploy/serve-logs"
SERVE_LOG_FILE = "vllm-serve.log"
NCCL_LOG_MOUNT = "/k3deploy/nccl-logs"
CONFIG_LABEL = "k3deploy.config"

# Flags and variables that carry credentials: they must never be put on a command line.
SECRET_FLAGS = frozenset({"api-key", "admin-api-key", "hf-token", "ssl-keyfile-password"})
SECRET_ENV = frozenset({"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "VLLM_API_KEY", "SGLANG_API_KEY"})
_SECRET_ENV_SUFFIX = re.compile(r"(TOKEN|API_KEY|SECRET|PASSWORD)$")
_SHA = re.compile(r"^[0-9a-f]{40}$")
_CONTAINER = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")


class SpecError(ValueError):
    """A LaunchSpec (or its extra args/env) that cannot produce a correct launch."""


@dataclass(frozen=True)
class LaunchSpec:
    engine: str
    image: str
    container_name: str
    model_repo: str
    revision_sha: str
    nnodes: int
    node_rank: int
    gpus_per_node: int
    head_address: str
    self_address: str
    nic: str
    layout: str
    hf_cache_host_path: str
    # None: the endpoint runs without an API key (no mount, no --config, no --env-file).
    secrets_host_dir: str | None
    # decided by cluster.moe_backend (precision x GPU); None: the engine's own default
    moe_runner_backend: str | None = None
    served_model_name: str | None = None
    dist_init_port: int = 20000
    serve_port: int = 8000
    ray_port: int = 6379
    # vLLM across nodes: "mp" (one `vllm serve` per node) or "ray"; None: mp (engines/layout.py)
    executor: str | None = None
    mem_fraction_static: float | None = SGLANG_MEM_FRACTION_STATIC
    dist_timeout: int | None = 3600
    context_length: int | None = None
    chunked_prefill_tokens: int | None = None
    mm_encoder_tp_mode: str | None = None
    extra_args: Mapping[str, FlagValue] = field(default_factory=dict)
    extra_env: Mapping[str, str | None] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    # The node's compile-cache dir for this launch's key (engines/compile_cache_key.py), or None.
    compile_cache_host_dir: str | None = None
    # Multi-node vLLM head: the node dir mounted at SERVE_LOG_MOUNT for the serve's output.
    serve_log_host_dir: str | None = None
    # The fabric the container gets (engines/fabric.py): HCAs for NCCL_IB_HCA with
    # /dev/infiniband passed in, or NCCL_IB_DISABLE=1 (sockets asked for).
    ib_hcas: tuple[str, ...] = ()
    ib_disable: bool = False
    # The node dir mounted at NCCL_LOG_MOUNT for NCCL's debug files (engines/fabric.py); None:
    # NCCL's lines go to the container's stdout only.
    nccl_log_host_dir: str | None = None

    def __post_init__(self) -> None:
        _check_engine_and_layout(self)
        _check_ranks(self)
        _check_addresses(self)
        _check_names(self)
        _check_extras(self)

    @property
    def model_name(self) -> str:
        """The name clients send as `model`."""
        return self.served_model_name or self.model_repo

    @property
    def world_size(self) -> int:
        return self.nnodes * self.gpus_per_node

    @property
    def is_head(self) -> bool:
        return self.node_rank == 0


def _check_engine_and_layout(spec: LaunchSpec) -> None:
    if spec.engine not in ENGINES:
        raise SpecError(f"engine must be one of {ENGINES}, got {spec.engine!r}")
    if LAYOUTS.get(spec.layout) != spec.engine:
        allowed = [k for k, v in LAYOUTS.items() if v == spec.engine]
        raise SpecError(f"layout {spec.layout!r} is not a {spec.engine} layout; use one of {allowed}")
    if not spec.image:
        raise SpecError("image is empty (pick one with engines/images.py choose_image)")
    if spec.executor is not None and (spec.engine != "vllm" or spec.executor not in EXECUTORS):
        raise SpecError(f"executor {spec.executor!r}: vLLM's is one of {EXECUTORS}; "
                        "SGLang has no executor choice")
    if spec.mem_fraction_static is not None and not 0 < spec.mem_fraction_static < 1:
        raise SpecError(f"mem_fraction_static must be in (0, 1), got {spec.mem_fraction_static}")


def _check_ranks(spec: LaunchSpec) -> None:
    if spec.nnodes < 1 or spec.gpus_per_node < 1:
        raise SpecError("nnodes and gpus_per_node must be >= 1")
    if not 0 <= spec.node_rank < spec.nnodes:
        raise SpecError(f"node_rank {spec.node_rank} outside 0..{spec.nnodes - 1}")
    if spec.is_head and spec.self_address != spec.head_address:
        raise SpecError(f"rank 0 must be the head: self {spec.self_address} != head {spec.head_address}")
    for name in ("dist_init_port", "serve_port", "ray_port"):
        port = getattr(spec, name)
        if not 0 < port < 65536:
            raise SpecError(f"{name} {port} is not a TCP port")


def _check_addresses(spec: LaunchSpec) -> None:
    for name in ("head_address", "self_address"):
        value = getattr(spec, name)
        try:
            ipaddress.IPv4Address(value)
        except ValueError:
            # An IPv6 or hostname --dist-init-addr hangs instead of failing (sglang#2892, #7478).
            raise SpecError(f"{name} must be an IPv4 address, got {value!r}") from None


def _check_names(spec: LaunchSpec) -> None:
    if not _CONTAINER.match(spec.container_name):
        raise SpecError(f"container name {spec.container_name!r} is not a valid docker name")
    if not _SHA.match(spec.revision_sha):
        raise SpecError(f"revision_sha must be a 40-hex commit sha, got {spec.revision_sha!r}")
    if not spec.nic or "/" in spec.nic:
        raise SpecError(f"nic {spec.nic!r} is not an interface name")
    for path_name in ("hf_cache_host_path", "secrets_host_dir", "serve_log_host_dir",
                      "nccl_log_host_dir"):
        path = getattr(spec, path_name)
        if path is not None and (not path.startswith("/") or ":" in path):
            raise SpecError(f"{path_name} must be an absolute path without ':', got {path!r}")


def _check_extras(spec: LaunchSpec) -> None:
    for flag, value in spec.extra_args.items():
        name = flag_name(flag)
        if name in SECRET_FLAGS:
            raise SpecError(f"--{name} would put a secret on the command line; the key is given "
                            "through the secrets file")
        if value is False:
            raise SpecError(f"extra arg {flag!r}: use null to remove a flag, not false")
    for key in spec.extra_env:
        if key in SECRET_ENV or _SECRET_ENV_SUFFIX.search(key):
            raise SpecError(f"env {key} looks like a secret; it would be visible in argv")
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
            raise SpecError(f"env name {key!r} is not a valid variable name")


def flag_name(flag: str) -> str:
    """'--tp-size' or 'tp-size' -> 'tp-size' (inventories write flags without dashes)."""
    name = flag[2:] if flag.startswith("--") else flag
    if not name or name.startswith("-") or " " in name:
        raise SpecError(f"{flag!r} is not a long flag name")
    return name


def render_flags(defaults: list[tuple[str, FlagValue]],
                 extra: Mapping[str, FlagValue]) -> list[str]:
    """Defaults in their fixed order, overridden in place or removed (None) by `extra`;
    flags only in `extra` follow, sorted, so equal inputs always give the same argv."""
    overrides = {flag_name(k): v for k, v in extra.items()}
    merged = [(name, overrides.pop(name, value)) for name, value in defaults]
    merged += sorted(overrides.items())
    argv: list[str] = []
    for name, value in merged:
        if value is None:
            continue
        argv.append(f"--{name}")
        if value is not True:
            argv.append(str(value))
    return argv

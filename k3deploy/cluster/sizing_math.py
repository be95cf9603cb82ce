"""VRAM arithmetic for Kimi K3: does a cluster hold the checkpoint, and what is left per GPU.

Pure functions, no I/O; the bottom of the sizing modules (sizing_notes and sizing_plan import
it, it imports neither; callers use the `sizing` facade). Every assumption is a named constant below with the place in
../shared/reference/kimi-k3-deployment-guide.txt it comes from. Memory is in decimal GB, as
in the guide. "Headroom" is the guide's naive figure (total HBM minus checkpoint); the per-rank
figures model what an engine actually keeps on each GPU.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import overload

from k3deploy.cluster.gpus import GpuModel
from k3deploy.cluster.moe_backend import moe_runner_backend
from k3deploy.core.jsonvalue import JSON
from k3deploy.engines.layout import VLLM_MAX_NODES as VLLM_MAX_NODES  # the sizing facade's too
from k3deploy.engines.static_fraction import SGLANG_MEM_FRACTION_STATIC as SGLANG_MEM_FRACTION_STATIC
from k3deploy.engines.static_fraction import VLLM_GPU_MEMORY_UTILIZATION as VLLM_GPU_MEMORY_UTILIZATION
from k3deploy.engines.static_fraction import default_static_fraction as default_static_fraction

# --- the model ("What Kimi K3 Actually Is", "VRAM Math") ---
ROUTED_EXPERTS = 896  # "896 total experts, 16 active per token"
ARCHITECTURAL_MAX_CONTEXT = 1_048_576  # "native 1,048,576-token (1M) context window"
# Checkpoint size per precision. mxfp4 is the published repo ("1,560.94 GB across 96 shards");
# mxfp8 ~2.8 TB and bf16 ~5.6 TB are the guide's estimates, "not a confirmed second SKU".
CHECKPOINT_GB = {"mxfp4": 1560.94, "mxfp8": 2800.0, "bf16": 5600.0}
PUBLISHED_PRECISIONS = ("mxfp4",)
NAIVE_MXFP4_GB = 2800.0 * 0.5  # "2.8T x 0.5 bytes": the 1.4 TB that misleads people

# --- the guide's measured 4x8 H100 SGLang figures ("Four 8x H100 Nodes"), derived from below ---
GUIDE_H100_RANKS = 32  # --tp-size 32 --ep-size 32
GUIDE_H100_PER_RANK_GB = 59.6  # "each rank ends up holding roughly 59.6GB resident"
GUIDE_H100_KV_POOL_GB = 3.6  # "about 3.6GB for the KV cache pool"
GUIDE_H100_KDA_STATE_GB = 3.4  # "another ~3.4GB for KDA's recurrent state"
# SGLANG_MEM_FRACTION_STATIC: the guide's launch, --mem-fraction-static 0.85 (engines/
# static_fraction.py). VLLM_GPU_MEMORY_UTILIZATION, vLLM's own default (not in the guide), plays
# the role of SGLang's static fraction for vLLM rows and is an upper bound there (vLLM's budget
# also covers activations).

# Per-rank duplication: "the extra ~350GB is per-rank duplication: every rank keeps a full copy
# of the attention, KDA, AttnRes, embedding, and MoonViT-V2 stack ... plus the repacked weight
# buffers the marlin kernel needs". Derived so 4x8 H100 gives 59.6 GB per rank (~1,908 GB over
# 32): 59.6 - 1,560.94/32 = 10.82 GB per rank. Applied to every precision and engine: the
# non-expert stack is already BF16/F32 in the checkpoint, and Blackwell needs no marlin buffers,
# so off Hopper/mxfp4 this is an upper bound (the guide gives no split between the two parts).
DUPLICATED_STACK_PER_RANK_GB = (
    GUIDE_H100_PER_RANK_GB - CHECKPOINT_GB["mxfp4"] / GUIDE_H100_RANKS
)
# Usable memory: "on an 80GB card with ~78GB usable". The exact value 78.35 is the one for
# which --mem-fraction-static 0.85 leaves the guide's 3.6 + 3.4 = 7.0 GB pool beside 59.6 GB
# (SGLang: weights + pool = fraction x memory). The 1.65 GB reserve (CUDA context, NCCL
# buffers) is assumed to be the same on every GPU model.
H100_USABLE_GB = (
    GUIDE_H100_PER_RANK_GB + GUIDE_H100_KV_POOL_GB + GUIDE_H100_KDA_STATE_GB
) / SGLANG_MEM_FRACTION_STATIC
PER_GPU_RESERVED_GB = 80.0 - H100_USABLE_GB
# KV/KDA split of the static pool: 3.6 of 7.0 GB on H100 (MLA KV cache vs KDA recurrent state);
# assumed to hold at other pool sizes.
KV_SHARE_OF_POOL = GUIDE_H100_KV_POOL_GB / (GUIDE_H100_KV_POOL_GB + GUIDE_H100_KDA_STATE_GB)

# --- context length ("KV Cache Overhead at 1M Context") ---
# "Moonshot has not published the exact per-token KV cache byte cost for K3": the planner does
# NOT turn --max-model-len into GB. What it can say: K2.6/K2.7 at a 256K ceiling needed 40-80 GB
# beyond weights; for K3 "budget ... well over 100GB beyond raw weights" for concurrent
# long-context sessions; set the length "to your actual traffic maximum" (e.g. 131072).
K2_CONTEXT_CEILING = 262_144
LONG_CONTEXT_BUDGET_GB = 100.0
SUGGESTED_CONTEXT_LENGTH = 131_072
# The planner's own threshold (not the guide's) for calling a pool tight: the guide calls the
# 3.6 GB H100 pool fine "for evals, batch generation, agentic runs", "not a high-concurrency
# production endpoint", and ~90 GB per GPU "real KV headroom".
TIGHT_KV_POOL_GB = 10.0
SUPERNODE_ACCELERATORS = 64  # Moonshot: "supernode configuration with 64 or more accelerators"

ENGINES = ("sglang", "vllm")
# VLLM_MAX_NODES (engines/layout.py): larger shapes default to SGLang.


@dataclass(frozen=True)
class LaunchShape:
    engine: str  # sglang | vllm
    tp: int
    ep: int
    dp: int
    dp_attention: bool  # attention replicated per rank (SGLang --enable-dp-attention, vLLM DP)
    ray: bool  # vLLM across nodes over a Ray cluster (engine.executor ray; new inventories: mp)
    moe_runner_backend: str | None  # moe_backend.moe_runner_backend: marlin for mxfp4 on Hopper
    static_fraction: float  # SGLang --mem-fraction-static / vLLM --gpu-memory-utilization
    context_length: int | None  # None: not chosen (engines then default to the 1M maximum)
    # vLLM across nodes: "mp", vLLM's multiprocessing executor (what new inventories say)
    executor: str | None = None


@dataclass(frozen=True)
class SizingResult:
    label: str
    gpu: str
    nodes: int
    gpus_per_node: int
    gpus: int
    precision: str
    engine: str
    total_memory_gb: float
    checkpoint_gb: float
    fits: bool  # weights load and the static budget leaves a KV pool
    headroom_gb: float  # total - checkpoint (the guide's naive figure; negative: short)
    headroom_per_gpu_gb: float
    experts_per_gpu: float
    min_gpus: int  # bare weight-fit, as the guide counts
    min_nodes: int
    min_gpus_to_serve: int | None  # with per-rank duplication and the static fraction
    min_nodes_to_serve: int | None
    usable_per_gpu_gb: float
    per_rank_resident_gb: float
    static_pool_per_gpu_gb: float  # KV + KDA, 0 when nothing is left
    kv_pool_per_gpu_gb: float
    kda_state_per_gpu_gb: float
    launch: LaunchShape
    cost_per_hour: float | None
    notes: tuple[str, ...]

    def to_dict(self) -> dict[str, JSON]:
        d = asdict(self)
        d["notes"] = list(self.notes)
        return {k: round(v, 2) if isinstance(v, float) else v for k, v in d.items()}


def usable_gb(gpu: GpuModel) -> float:
    return gpu.memory_gb - PER_GPU_RESERVED_GB


def checkpoint_gb(precision: str) -> float:
    if precision not in CHECKPOINT_GB:
        raise ValueError(f"unknown precision {precision!r}; known: {', '.join(CHECKPOINT_GB)}")
    return CHECKPOINT_GB[precision]


def default_engine(gpu: GpuModel, nodes: int = 1) -> str:
    # Hopper: SGLang's cookbook cell (marlin); Blackwell: the guide's vLLM DP+EP recipes,
    # which stop at two nodes.
    return "vllm" if gpu.fp4_native and nodes <= VLLM_MAX_NODES else "sglang"


def launch_shape(gpu: GpuModel, gpus: int, nodes: int, precision: str, engine: str, fraction: float,
                 context_length: int | None, vllm_shape: str = "dp-ep") -> LaunchShape:
    """The layouts k3deploy launches (launchspec.layout_for): SGLang on one node is the guide's
    B300 cell (TP=EP=DP, DP attention), across nodes the H100 cookbook cell (TP=EP=all GPUs,
    the MoE backend from moe_backend); vLLM is DP=EP=all GPUs, with the mp executor across
    nodes. vllm_shape "tp": vLLM's own multi-node recipe cell, TP=all GPUs (experts split by
    TP, no EP flag), shown beside it; k3deploy does not launch it."""
    executor = "mp" if nodes > 1 else None
    if engine == "vllm" and vllm_shape == "tp":
        return LaunchShape("vllm", gpus, gpus, 1, False, False, None, fraction, context_length,
                           executor)
    if engine == "vllm":
        return LaunchShape("vllm", 1, gpus, gpus, True, False, None, fraction, context_length,
                           executor)
    backend = moe_runner_backend(engine, gpu, precision)
    if nodes == 1:
        return LaunchShape("sglang", gpus, gpus, gpus, True, False, backend, fraction,
                           context_length)
    return LaunchShape("sglang", gpus, gpus, 1, False, False, backend, fraction, context_length)


def per_rank_resident_gb(precision: str, ranks: int) -> float:
    return checkpoint_gb(precision) / ranks + DUPLICATED_STACK_PER_RANK_GB


def min_gpus(gpu: GpuModel, precision: str) -> int:
    """Bare weight-fit on nominal memory, the way the guide counts (NVL72: 16 for mxfp8)."""
    return math.ceil(checkpoint_gb(precision) / gpu.memory_gb - 1e-9)


def min_gpus_to_serve(gpu: GpuModel, precision: str, fraction: float) -> int | None:
    """Fewest GPUs whose per-rank resident weights stay inside the static budget (KV pool > 0);
    None when even one more GPU never leaves room for the duplicated stack."""
    room = fraction * usable_gb(gpu) - DUPLICATED_STACK_PER_RANK_GB
    if room <= 0:
        return None
    return math.floor(checkpoint_gb(precision) / room) + 1


def fraction_needed(resident: float, gpu: GpuModel) -> float:
    """Smallest static fraction (2 decimals) that leaves any pool beside the resident weights."""
    return math.floor(resident / usable_gb(gpu) * 100) / 100 + 0.01


@overload
def _nodes_for(gpus: int, per_node: int) -> int: ...
@overload
def _nodes_for(gpus: int | None, per_node: int) -> int | None: ...
def _nodes_for(gpus: int | None, per_node: int) -> int | None:
    return None if gpus is None else math.ceil(gpus / per_node)


def default_label(gpu: GpuModel, nodes: int, gpus_per_node: int) -> str:
    short = gpu.name.split()[0]
    return f"{gpus_per_node}x {short}" if nodes == 1 else f"{nodes}x{gpus_per_node} {short}"


def _check_inputs(nodes: int, gpus_per_node: int, engine: str, fraction: float, max_model_len: int | None,
                  price: float | None) -> None:
    if nodes < 1 or gpus_per_node < 1:
        raise ValueError("nodes and GPUs per node must be at least 1")
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    if not 0 < fraction <= 1:
        raise ValueError(f"memory fraction must be in (0, 1], got {fraction}")
    if max_model_len is not None and max_model_len < 1:
        raise ValueError(f"max model length must be positive, got {max_model_len}")
    if price is not None and price < 0:
        raise ValueError(f"price per GPU-hour must not be negative, got {price}")

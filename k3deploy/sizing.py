"""VRAM arithmetic for Kimi K3: does a cluster hold the checkpoint, and what is left per GPU.

Pure functions, no I/O. Every assumption is a named constant below with the place in
../shared/reference/kimi-k3-deployment-guide.txt it comes from. Memory is in decimal GB, as
in the guide. "Headroom" is the guide's naive figure (total HBM minus checkpoint); the per-rank
figures model what an engine actually keeps on each GPU.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from k3deploy.gpus import GpuModel, get_gpu

# --- the model ("What Kimi K3 Actually Is", "VRAM Math") ---
ROUTED_EXPERTS = 896  # "896 total experts, 16 active per token"
ARCHITECTURAL_MAX_CONTEXT = 1_048_576  # "native 1,048,576-token (1M) context window"
# Checkpoint size per precision. mxfp4 is the published repo ("1,560.94 GB across 96 shards");
# mxfp8 ~2.8 TB and bf16 ~5.6 TB are the guide's estimates, "not a confirmed second SKU".
CHECKPOINT_GB = {"mxfp4": 1560.94, "mxfp8": 2800.0, "bf16": 5600.0}
CHECKPOINT_SHARDS = {"mxfp4": 96}
PUBLISHED_PRECISIONS = ("mxfp4",)
NAIVE_MXFP4_GB = 2800.0 * 0.5  # "2.8T x 0.5 bytes": the 1.4 TB that misleads people

# --- the guide's measured 4x8 H100 SGLang figures ("Four 8x H100 Nodes"), derived from below ---
GUIDE_H100_RANKS = 32  # --tp-size 32 --ep-size 32
GUIDE_H100_PER_RANK_GB = 59.6  # "each rank ends up holding roughly 59.6GB resident"
GUIDE_H100_KV_POOL_GB = 3.6  # "about 3.6GB for the KV cache pool"
GUIDE_H100_KDA_STATE_GB = 3.4  # "another ~3.4GB for KDA's recurrent state"
SGLANG_MEM_FRACTION_STATIC = 0.85  # the guide's launch: --mem-fraction-static 0.85
# vLLM's own default for --gpu-memory-utilization (not in the guide); it plays the role of
# SGLang's static fraction for vLLM rows and is an upper bound there (vLLM's budget also
# covers activations).
VLLM_GPU_MEMORY_UTILIZATION = 0.90

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
# The guide's vLLM layouts: one node (8x B300, DP8+EP8) or two over Ray (2x8 B200, DP16+EP16);
# k3deploy's inventory rules refuse vLLM on more nodes, so larger shapes default to SGLang.
VLLM_MAX_NODES = 2


@dataclass(frozen=True)
class LaunchShape:
    engine: str  # sglang | vllm
    tp: int
    ep: int
    dp: int
    dp_attention: bool  # attention replicated per rank (SGLang --enable-dp-attention, vLLM DP)
    ray: bool  # vLLM across nodes runs over a Ray cluster
    moe_runner_backend: str | None  # "marlin" for mxfp4 on GPUs without FP4 tensor cores
    static_fraction: float  # SGLang --mem-fraction-static / vLLM --gpu-memory-utilization
    context_length: int | None  # None: not chosen (engines then default to the 1M maximum)


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

    def to_dict(self) -> dict:
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


def default_static_fraction(engine: str) -> float:
    return SGLANG_MEM_FRACTION_STATIC if engine == "sglang" else VLLM_GPU_MEMORY_UTILIZATION


def launch_shape(gpu, gpus, nodes, precision, engine, fraction, context_length) -> LaunchShape:
    """The layouts k3deploy launches (launchspec.layout_for): SGLang on one node is the guide's
    B300 cell (TP=EP=DP, DP attention), across nodes the H100 cookbook cell (TP=EP=all GPUs,
    marlin for mxfp4 on Hopper); vLLM is DP=EP=all GPUs, over Ray across nodes."""
    if engine == "vllm":
        return LaunchShape("vllm", 1, gpus, gpus, True, nodes > 1, None, fraction, context_length)
    if nodes == 1:
        return LaunchShape("sglang", gpus, gpus, gpus, True, False, None, fraction, context_length)
    marlin = "marlin" if precision == "mxfp4" and not gpu.fp4_native else None
    return LaunchShape("sglang", gpus, gpus, 1, False, False, marlin, fraction, context_length)


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


def _nodes_for(gpus: int | None, per_node: int) -> int | None:
    return None if gpus is None else math.ceil(gpus / per_node)


def default_label(gpu: GpuModel, nodes: int, gpus_per_node: int) -> str:
    short = gpu.name.split()[0]
    return f"{gpus_per_node}x {short}" if nodes == 1 else f"{nodes}x{gpus_per_node} {short}"


def _check_inputs(nodes, gpus_per_node, engine, fraction, max_model_len, price) -> None:
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


def size_config(
    gpu: str | GpuModel,
    nodes: int,
    gpus_per_node: int | None = None,
    precision: str = "mxfp4",
    engine: str | None = None,
    max_model_len: int | None = None,
    mem_fraction_static: float | None = None,
    price_per_gpu_hour: float | None = None,
    label: str | None = None,
) -> SizingResult:
    """The arithmetic for one cluster shape."""
    gpu = get_gpu(gpu)
    per_node = gpu.gpus_per_node if gpus_per_node is None else gpus_per_node
    engine = engine or default_engine(gpu, nodes)
    fraction = mem_fraction_static
    if fraction is None:
        fraction = default_static_fraction(engine)
    _check_inputs(nodes, per_node, engine, fraction, max_model_len, price_per_gpu_hour)
    gpus = nodes * per_node
    total, ckpt = gpus * gpu.memory_gb, checkpoint_gb(precision)
    resident = per_rank_resident_gb(precision, gpus)
    pool = fraction * usable_gb(gpu) - resident
    shape = launch_shape(gpu, gpus, nodes, precision, engine, fraction, max_model_len)
    serve = min_gpus_to_serve(gpu, precision, fraction)
    bare = min_gpus(gpu, precision)
    result = SizingResult(
        label=label or default_label(gpu, nodes, per_node),
        gpu=gpu.key, nodes=nodes, gpus_per_node=per_node, gpus=gpus,
        precision=precision, engine=engine,
        total_memory_gb=total, checkpoint_gb=ckpt,
        fits=total >= ckpt and pool > 0,
        headroom_gb=total - ckpt, headroom_per_gpu_gb=(total - ckpt) / gpus,
        experts_per_gpu=ROUTED_EXPERTS / shape.ep,
        min_gpus=bare, min_nodes=_nodes_for(bare, per_node),
        min_gpus_to_serve=serve, min_nodes_to_serve=_nodes_for(serve, per_node),
        usable_per_gpu_gb=usable_gb(gpu), per_rank_resident_gb=resident,
        static_pool_per_gpu_gb=max(pool, 0.0),
        kv_pool_per_gpu_gb=max(pool, 0.0) * KV_SHARE_OF_POOL,
        kda_state_per_gpu_gb=max(pool, 0.0) * (1 - KV_SHARE_OF_POOL),
        launch=shape,
        cost_per_hour=None if price_per_gpu_hour is None else price_per_gpu_hour * gpus,
        notes=(),
    )
    return replace(result, notes=tuple(notes_for(result, gpu)))


# --- notes: what a person choosing this shape must know ---


def _flag(engine: str) -> str:
    return "--mem-fraction-static" if engine == "sglang" else "--gpu-memory-utilization"


def _fit_notes(r: SizingResult, gpu: GpuModel) -> list[str]:
    usable, resident = r.usable_per_gpu_gb, r.per_rank_resident_gb
    flag = f"{_flag(r.engine)} {r.launch.static_fraction:g}"
    if r.headroom_gb < 0:
        notes = [
            f"{r.label} does not fit {r.precision}: {r.total_memory_gb:,.0f} GB < "
            f"{r.checkpoint_gb:,.2f} GB checkpoint, short by ~{-r.headroom_gb:,.0f} GB; each rank "
            f"needs {resident:.1f} GB of {usable:.1f} GB usable, so it dies "
            f"~{100 * usable / resident:.0f}% of the way through weight loading"
        ]
        if r.precision == "mxfp4" and r.total_memory_gb > NAIVE_MXFP4_GB:
            notes.append(
                f"it would clear the naive 1.4 TB (2.8T x 0.5 bytes) by "
                f"{r.total_memory_gb - NAIVE_MXFP4_GB:,.0f} GB: plan around the real checkpoint"
            )
    elif resident > usable:
        notes = [
            f"total memory holds the checkpoint, but each rank needs {resident:.1f} GB (its share "
            f"plus the {DUPLICATED_STACK_PER_RANK_GB:.1f} GB duplicated stack) of {usable:.1f} GB "
            f"usable: weight loading fails ~{100 * usable / resident:.0f}% of the way"
        ]
    elif not r.fits:
        need = fraction_needed(resident, gpu)
        fix = f"raise it to at least {need:.2f}" if need <= 1 else "no fraction leaves room"
        notes = [
            f"weights load ({resident:.1f} of {usable:.1f} GB per GPU) but leave no KV pool "
            f"at {flag}: {fix}"
        ]
    else:
        return []
    if r.min_gpus_to_serve is not None:
        notes.append(
            f"needs at least {r.min_gpus_to_serve} {gpu.name} GPUs ({r.min_nodes_to_serve} x "
            f"{r.gpus_per_node}) to serve at {flag}; bare weight-fit says {r.min_gpus}"
        )
    return notes


def _context_notes(r: SizingResult) -> list[str]:
    length = r.launch.context_length
    if length is None:
        return []
    notes = []
    if length > ARCHITECTURAL_MAX_CONTEXT:
        notes.append(
            f"context {length:,} exceeds the {ARCHITECTURAL_MAX_CONTEXT:,}-token architectural max"
        )
    elif length == ARCHITECTURAL_MAX_CONTEXT:
        notes.append(
            f"{length:,} is the architectural max, not a target: set the context length to your "
            f"traffic max (e.g. {SUGGESTED_CONTEXT_LENGTH}); unused context is KV pool paid for"
        )
    # MLA's latent KV is replicated across TP ranks; each attention replica (DP rank) has its own.
    kv_replicas = r.kv_pool_per_gpu_gb * r.launch.dp
    if length > K2_CONTEXT_CEILING and r.fits and kv_replicas < LONG_CONTEXT_BUDGET_GB:
        notes.append(
            f"long context: the guide budgets well over {LONG_CONTEXT_BUDGET_GB:.0f} GB beyond "
            f"weights for concurrent long-context sessions; this shape has {kv_replicas:.1f} GB "
            f"of KV pool over its attention replicas (no per-token KV size is published)"
        )
    return notes


def notes_for(r: SizingResult, gpu: GpuModel) -> list[str]:
    notes = _fit_notes(r, gpu)
    if r.fits and r.kv_pool_per_gpu_gb < TIGHT_KV_POOL_GB:
        notes.append(
            f"KV pool only {r.kv_pool_per_gpu_gb:.1f} GB per GPU (+{r.kda_state_per_gpu_gb:.1f} GB "
            f"KDA state): fine for evals, batch and agentic runs, not a high-concurrency endpoint"
        )
    if r.launch.moe_runner_backend == "marlin":
        notes.append(
            "no FP4 tensor cores: mxfp4 runs through --moe-runner-backend marlin (W4A16); "
            "the guide measured ~6 tok/s single-stream decode on 4x8 H100"
        )
    if r.precision not in PUBLISHED_PRECISIONS:
        notes.append(
            f"no published {r.precision} checkpoint as of the guide: "
            f"~{r.checkpoint_gb / 1000:.1f} TB assumes one exists (or an upcast at load time)"
        )
        if r.fits and r.gpus < SUPERNODE_ACCELERATORS:
            notes.append(
                f"below Moonshot's {SUPERNODE_ACCELERATORS}+ accelerators for production: the gap "
                f"is KV headroom, concurrency and redundancy"
            )
    if r.engine == "vllm" and r.nodes > VLLM_MAX_NODES:
        notes.append(
            f"the guide's vLLM layouts stop at {VLLM_MAX_NODES} nodes (Ray); k3deploy launches "
            f"this shape with SGLang"
        )
    if ROUTED_EXPERTS % r.launch.ep:
        notes.append(f"{ROUTED_EXPERTS} experts do not split evenly over EP {r.launch.ep}")
    return notes + _context_notes(r)


# --- the guide's reference configs and the planner entry points ---


@dataclass(frozen=True)
class ReferenceConfig:
    label: str
    gpu: str
    nodes: int
    gpus_per_node: int
    precision: str
    engine: str


# Grouped by GPU, smallest first; rows that do not fit are kept where the guide warns about them.
REFERENCE_CONFIGS: tuple[ReferenceConfig, ...] = tuple(
    ReferenceConfig(*row)
    for row in (
        ("4x8 H100", "h100", 4, 8, "mxfp4", "sglang"),  # SGLang cookbook cell
        ("4x8 H200", "h200", 4, 8, "mxfp4", "sglang"),  # "the same 4x8 topology with real KV"
        ("4x8 H200", "h200", 4, 8, "mxfp8", "sglang"),
        ("8x B200", "b200", 1, 8, "mxfp4", "vllm"),  # the trap: dies at ~94% of loading
        ("2x8 B200", "b200", 2, 8, "mxfp4", "vllm"),  # DP16+EP16 over Ray
        ("8x B300", "b300", 1, 8, "mxfp4", "vllm"),  # DP8+EP8, the only one-node option
        ("8x B300", "b300", 1, 8, "mxfp4", "sglang"),  # --tp 8 --ep-size 8 --enable-dp-attention
        ("2x8 B300", "b300", 2, 8, "mxfp8", "vllm"),  # "over 1.8TB of headroom"
        ("3x8 B300", "b300", 3, 8, "bf16", "sglang"),  # "BF16 needs closer to three B300 nodes"
        ("NVL72 slice, 16", "gb200", 4, 4, "mxfp8", "sglang"),  # bare weight-fit minimum
        ("NVL72 slice, 32", "gb200", 8, 4, "bf16", "sglang"),  # 31 rounded up to whole trays
        ("NVL72 rack, 72", "gb200", 18, 4, "mxfp4", "sglang"),
        ("NVL72 rack, 72", "gb200", 18, 4, "mxfp8", "sglang"),
        ("NVL72 rack, 72", "gb200", 18, 4, "bf16", "sglang"),
    )
)


def _fewest_nodes_that_serve(gpu: GpuModel, per_node: int, precision: str, opts: dict) -> int:
    fraction = opts["mem_fraction_static"]
    if fraction is None:
        fraction = default_static_fraction(opts["engine"] or default_engine(gpu, 1))
    serve = min_gpus_to_serve(gpu, precision, fraction) or min_gpus(gpu, precision)
    return max(1, math.ceil(serve / per_node))


def _reference_results(model: GpuModel | None, precision: str | None, opts: dict) -> list:
    """The reference configs for a GPU / precision filter; the engine option overrides theirs."""
    chosen: dict[tuple, ReferenceConfig] = {}
    for ref in REFERENCE_CONFIGS:
        if model in (None, get_gpu(ref.gpu)) and precision in (None, ref.precision):
            ref = replace(ref, engine=opts["engine"] or ref.engine)
            key = (ref.gpu, ref.nodes, ref.gpus_per_node, ref.precision, ref.engine)
            chosen.setdefault(key, ref)
    return [
        size_config(r.gpu, r.nodes, r.gpus_per_node, r.precision, label=r.label,
                    **{**opts, "engine": r.engine})
        for r in chosen.values()
    ]


def plan(
    gpu: str | None = None,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
    precision: str | None = None,
    engine: str | None = None,
    max_model_len: int | None = None,
    mem_fraction_static: float | None = None,
    price_per_gpu_hour: float | None = None,
) -> list[SizingResult]:
    """No shape given: the guide's reference configs (filtered by gpu/precision, engine
    overriding theirs; a GPU without one gets its smallest serving shape). A shape given (nodes
    and/or GPUs per node): that shape at every precision unless one is named, nodes defaulting
    to the fewest that serve. Bad input raises ValueError."""
    opts = dict(
        engine=engine, max_model_len=max_model_len,
        mem_fraction_static=mem_fraction_static, price_per_gpu_hour=price_per_gpu_hour,
    )
    model = get_gpu(gpu) if gpu is not None else None
    if precision is not None:
        checkpoint_gb(precision)  # raises for an unknown precision
    precisions = [precision] if precision else list(CHECKPOINT_GB)
    if nodes is None and gpus_per_node is None:
        results = _reference_results(model, precision, opts)
        if results:
            return results
    if model is None:
        raise ValueError("a cluster shape (--nodes / --gpus-per-node) needs --gpu")
    per_node = model.gpus_per_node if gpus_per_node is None else gpus_per_node
    if per_node < 1:
        raise ValueError("GPUs per node must be at least 1")
    return [
        size_config(
            model, _fewest_nodes_that_serve(model, per_node, p, opts) if nodes is None else nodes,
            per_node, p, **opts,
        )
        for p in precisions
    ]


def explain(r: SizingResult) -> str:
    """One paragraph with the arithmetic, for `plan`, `up` and `check` messages."""
    gpu = get_gpu(r.gpu)
    head = (
        f"{r.label} ({r.gpus} x {gpu.memory_gb:g} GB {gpu.name} = {r.total_memory_gb:,.0f} GB) "
        f"at {r.precision} ({r.checkpoint_gb:,.2f} GB checkpoint): "
    )
    if not r.fits:
        return head + "; ".join(_fit_notes(r, gpu)) + "."
    return head + (
        f"fits with {r.headroom_gb:,.0f} GB headroom; per rank {r.per_rank_resident_gb:.1f} GB "
        f"resident of {r.usable_per_gpu_gb:.1f} GB usable leaves a {r.kv_pool_per_gpu_gb:.1f} GB "
        f"KV pool + {r.kda_state_per_gpu_gb:.1f} GB KDA state per GPU at "
        f"{_flag(r.engine)} {r.launch.static_fraction:g}."
    )


def fits_inventory(
    gpu: str,
    nodes: int,
    gpus_per_node: int,
    precision: str,
    engine: str | None = None,
    mem_fraction_static: float | None = None,
) -> tuple[bool, str]:
    """For `up`/`check`: (False, why) for a cluster that cannot serve (8x B200 at mxfp4),
    with the arithmetic in the message; (True, the same arithmetic) otherwise."""
    result = size_config(gpu, nodes, gpus_per_node, precision, engine=engine,
                         mem_fraction_static=mem_fraction_static)
    return result.fits, explain(result)


def fits_inventory_of(inv) -> tuple[bool, str]:
    """fits_inventory for a loaded inventory (k3deploy.inventory.Inventory), with its engine
    and static fraction: an engine.args override first, then SGLang's engine.mem_fraction_static."""
    engine = inv.engine.kind
    flag = "mem-fraction-static" if engine == "sglang" else "gpu-memory-utilization"
    fraction = inv.engine.args.get(flag)
    if fraction is None and engine == "sglang":
        fraction = inv.engine.mem_fraction_static
    if isinstance(fraction, bool):
        fraction = None
    return fits_inventory(
        inv.gpu.model, len(inv.nodes), inv.gpu.count, inv.model.precision, engine=engine,
        mem_fraction_static=None if fraction is None else float(fraction),
    )

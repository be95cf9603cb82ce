"""The guide's reference configs and the planner's entry points (size_config, plan, explain,
fits_inventory), on top of the arithmetic in sizing_math.py and the notes in sizing_notes.py."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypedDict

from k3deploy.cluster import sizing_math as S
from k3deploy.cluster.gpus import GpuModel, get_gpu
from k3deploy.engines.static_fraction import inventory_static_fraction
from k3deploy.cluster.sizing_math import (ROUTED_EXPERTS, KV_SHARE_OF_POOL, SizingResult,
                                          _check_inputs, _nodes_for, checkpoint_gb,
                                          default_engine, default_label, default_static_fraction,
                                          launch_shape, min_gpus, min_gpus_to_serve,
                                          per_rank_resident_gb, usable_gb)
from k3deploy.cluster.sizing_notes import _fit_notes, _flag, notes_for

if TYPE_CHECKING:
    from k3deploy.cluster.inventory import Inventory


class SizingOptions(TypedDict):
    """What `plan` passes on to every size_config it makes."""
    engine: str | None
    max_model_len: int | None
    mem_fraction_static: float | None
    price_per_gpu_hour: float | None

@dataclass(frozen=True)
class ReferenceConfig:
    label: str
    gpu: str
    nodes: int
    gpus_per_node: int
    precision: str
    engine: str
    shape: str = "dp-ep"   # vLLM: "tp" is its own recipe's TP cell (sizing_math.launch_shape)


# Grouped by GPU, smallest first; rows that do not fit are kept where the guide warns about them.
REFERENCE_CONFIGS: tuple[ReferenceConfig, ...] = tuple(
    ReferenceConfig(*row)
    for row in (
        ("4x8 H100", "h100", 4, 8, "mxfp4", "sglang"),  # SGLang cookbook cell
        ("4x8 H200", "h200", 4, 8, "mxfp4", "sglang"),  # "the same 4x8 topology with real KV"
        ("4x8 H200", "h200", 4, 8, "mxfp8", "sglang"),
        ("8x B200", "b200", 1, 8, "mxfp4", "vllm"),  # the trap: dies at ~94% of loading
        ("2x8 B200", "b200", 2, 8, "mxfp4", "vllm"),  # the guide's DP16+EP16 (mp executor)
        # vLLM's own B200 cell (recipes.vllm.ai Kimi-K3, Multi-Node TP): TP16 across the nodes
        ("2x8 B200", "b200", 2, 8, "mxfp4", "vllm", "tp"),
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
    vllm_shape: str = "dp-ep",
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
    shape = launch_shape(gpu, gpus, nodes, precision, engine, fraction, max_model_len, vllm_shape)
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


def _fewest_nodes_that_serve(gpu: GpuModel, per_node: int, precision: str, opts: SizingOptions) -> int:
    fraction = opts["mem_fraction_static"]
    if fraction is None:
        fraction = S.default_static_fraction(opts["engine"] or S.default_engine(gpu, 1))
    serve = S.min_gpus_to_serve(gpu, precision, fraction) or S.min_gpus(gpu, precision)
    return max(1, math.ceil(serve / per_node))


def _reference_results(model: GpuModel | None, precision: str | None,
                       opts: SizingOptions) -> list[S.SizingResult]:
    """The reference configs for a GPU / precision filter; the engine option overrides theirs."""
    chosen: dict[tuple[str, int, int, str, str, str], ReferenceConfig] = {}
    for ref in REFERENCE_CONFIGS:
        if model in (None, get_gpu(ref.gpu)) and precision in (None, ref.precision):
            ref = replace(ref, engine=opts["engine"] or ref.engine)
            key = (ref.gpu, ref.nodes, ref.gpus_per_node, ref.precision, ref.engine,
                   ref.shape if ref.engine == "vllm" else "")
            chosen.setdefault(key, ref)
    return [
        size_config(r.gpu, r.nodes, r.gpus_per_node, r.precision, label=r.label,
                    vllm_shape=r.shape, **SizingOptions({**opts, "engine": r.engine}))
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
) -> list[S.SizingResult]:
    """No shape given: the guide's reference configs (filtered by gpu/precision, engine
    overriding theirs; a GPU without one gets its smallest serving shape). A shape given (nodes
    and/or GPUs per node): that shape at every precision unless one is named, nodes defaulting
    to the fewest that serve. Bad input raises ValueError."""
    opts = SizingOptions(
        engine=engine, max_model_len=max_model_len,
        mem_fraction_static=mem_fraction_static, price_per_gpu_hour=price_per_gpu_hour,
    )
    model = get_gpu(gpu) if gpu is not None else None
    if precision is not None:
        S.checkpoint_gb(precision)  # raises for an unknown precision
    precisions = [precision] if precision else list(S.CHECKPOINT_GB)
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


def explain(r: S.SizingResult) -> str:
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


def fits_inventory_of(inv: Inventory) -> tuple[bool, str]:
    """fits_inventory for a loaded inventory (k3deploy.cluster.inventory.Inventory), with its engine
    and static fraction: an engine.args override first, then SGLang's engine.mem_fraction_static."""
    return fits_inventory(
        inv.gpu.model, len(inv.nodes), inv.gpu.count, inv.model.precision,
        engine=inv.engine.kind, mem_fraction_static=inventory_static_fraction(inv),
    )


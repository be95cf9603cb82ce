"""Notes on a sized config: what a person choosing this shape must know.

Above sizing_math.py (the arithmetic, whose constants it reads), below sizing_plan.py.
"""

from __future__ import annotations

from k3deploy.cluster import sizing_math as S
from k3deploy.cluster.gpus import GpuModel

def _flag(engine: str) -> str:
    return "--mem-fraction-static" if engine == "sglang" else "--gpu-memory-utilization"


def _fit_notes(r: S.SizingResult, gpu: GpuModel) -> list[str]:
    usable, resident = r.usable_per_gpu_gb, r.per_rank_resident_gb
    flag = f"{_flag(r.engine)} {r.launch.static_fraction:g}"
    if r.headroom_gb < 0:
        notes = [
            f"{r.label} does not fit {r.precision}: {r.total_memory_gb:,.0f} GB < "
            f"{r.checkpoint_gb:,.2f} GB checkpoint, short by ~{-r.headroom_gb:,.0f} GB; each rank "
            f"needs {resident:.1f} GB of {usable:.1f} GB usable, so it dies "
            f"~{100 * usable / resident:.0f}% of the way through weight loading"
        ]
        if r.precision == "mxfp4" and r.total_memory_gb > S.NAIVE_MXFP4_GB:
            notes.append(
                f"it would clear the naive 1.4 TB (2.8T x 0.5 bytes) by "
                f"{r.total_memory_gb - S.NAIVE_MXFP4_GB:,.0f} GB: plan around the real checkpoint"
            )
    elif resident > usable:
        notes = [
            f"total memory holds the checkpoint, but each rank needs {resident:.1f} GB (its share "
            f"plus the {S.DUPLICATED_STACK_PER_RANK_GB:.1f} GB duplicated stack) of {usable:.1f} GB "
            f"usable: weight loading fails ~{100 * usable / resident:.0f}% of the way"
        ]
    elif not r.fits:
        need = S.fraction_needed(resident, gpu)
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


def _context_notes(r: S.SizingResult) -> list[str]:
    length = r.launch.context_length
    if length is None:
        return []
    notes = []
    if length > S.ARCHITECTURAL_MAX_CONTEXT:
        notes.append(
            f"context {length:,} exceeds the {S.ARCHITECTURAL_MAX_CONTEXT:,}-token architectural max"
        )
    elif length == S.ARCHITECTURAL_MAX_CONTEXT:
        notes.append(
            f"{length:,} is the architectural max, not a target: set the context length to your "
            f"traffic max (e.g. {S.SUGGESTED_CONTEXT_LENGTH}); unused context is KV pool paid for"
        )
    # MLA's latent KV is replicated across TP ranks; each attention replica (DP rank) has its own.
    kv_replicas = r.kv_pool_per_gpu_gb * r.launch.dp
    if length > S.K2_CONTEXT_CEILING and r.fits and kv_replicas < S.LONG_CONTEXT_BUDGET_GB:
        notes.append(
            f"long context: the guide budgets well over {S.LONG_CONTEXT_BUDGET_GB:.0f} GB beyond "
            f"weights for concurrent long-context sessions; this shape has {kv_replicas:.1f} GB "
            f"of KV pool over its attention replicas (no per-token KV size is published)"
        )
    return notes


def notes_for(r: S.SizingResult, gpu: GpuModel) -> list[str]:
    notes = _fit_notes(r, gpu)
    if r.fits and r.kv_pool_per_gpu_gb < S.TIGHT_KV_POOL_GB:
        notes.append(
            f"KV pool only {r.kv_pool_per_gpu_gb:.1f} GB per GPU (+{r.kda_state_per_gpu_gb:.1f} GB "
            f"KDA state): fine for evals, batch and agentic runs, not a high-concurrency endpoint"
        )
    if r.launch.moe_runner_backend == "marlin":
        notes.append(
            "no FP4 tensor cores: mxfp4 runs through --moe-runner-backend marlin (W4A16); "
            "the guide measured ~6 tok/s single-stream decode on 4x8 H100"
        )
    if r.precision not in S.PUBLISHED_PRECISIONS:
        notes.append(
            f"no published {r.precision} checkpoint as of the guide: "
            f"~{r.checkpoint_gb / 1000:.1f} TB assumes one exists (or an upcast at load time)"
        )
        if r.fits and r.gpus < S.SUPERNODE_ACCELERATORS:
            notes.append(
                f"below Moonshot's {S.SUPERNODE_ACCELERATORS}+ accelerators for production: the gap "
                f"is KV headroom, concurrency and redundancy"
            )
    if r.engine == "vllm" and r.nodes > S.VLLM_MAX_NODES:
        notes.append(
            f"the guide's vLLM layouts stop at {S.VLLM_MAX_NODES} nodes (Ray); k3deploy launches "
            f"this shape with SGLang"
        )
    if r.engine == "vllm" and r.launch.tp > 1:
        notes.append(
            f"vLLM's own recipe cell: TP{r.launch.tp} over --nnodes/--node-rank/--master-addr (mp "
            "executor); same weights per GPU as DP+EP, but attention is TP-split, so each GPU's KV "
            "pool serves the one engine instead of one DP rank each (vLLM "
            "docs/serving/data_parallel_deployment.md: DP attention for MLA models). k3deploy "
            "launches the DP+EP row"
        )
    if S.ROUTED_EXPERTS % r.launch.ep:
        notes.append(f"{S.ROUTED_EXPERTS} experts do not split evenly over EP {r.launch.ep}")
    return notes + _context_notes(r)



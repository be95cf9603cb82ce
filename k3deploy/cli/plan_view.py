"""How `k3deploy plan` shows sizing results: a rich table for people, JSON for scripts."""

from __future__ import annotations

from typing import TypedDict

from rich import box
from rich.console import JustifyMethod
from rich.markup import escape
from rich.table import Table

from k3deploy.cluster import sizing
from k3deploy.cluster.sizing import SizingResult
from k3deploy.core.jsonvalue import JSON

CAPTION = (
    "GB are decimal. Headroom = total HBM - checkpoint (the guide's figure). Min GPUs: bare "
    "weight-fit / enough to serve with the per-rank model. Rank GB: each rank's share of the "
    "checkpoint plus a {dup:.1f} GB duplicated stack; KV + KDA = static fraction x usable memory "
    "- Rank GB, split {kv:.0%} / {kda:.0%}. No per-token KV size is published for K3, so context "
    "length is not priced in GB."
)


def launch_text(r: SizingResult) -> str:
    """The parallel layout in the engines' own terms, e.g. "sglang TP32 EP32 marlin"."""
    s = r.launch
    if s.engine == "vllm":
        parts = [f"TP{s.tp}"] if s.tp > 1 else [f"DP{s.dp}", f"EP{s.ep}"]
        parts += ["Ray"] if s.ray else [s.executor] if s.executor else []
    else:
        parts = [f"TP{s.tp}", f"EP{s.ep}"] + ([f"DP{s.dp}", "dp-attn"] if s.dp_attention else [])
    parts += [s.moe_runner_backend] if s.moe_runner_backend else []
    return " ".join([s.engine] + parts)


def _experts(r: SizingResult) -> str:
    n = r.experts_per_gpu
    return f"{n:g}" if n.is_integer() else f"{n:.1f}"


def _min_gpus(r: SizingResult) -> str:
    serve = "-" if r.min_gpus_to_serve is None else str(r.min_gpus_to_serve)
    return f"{r.min_gpus}/{serve}"


def _row(r: SizingResult, with_cost: bool, note_refs: str) -> list[str]:
    fits = "[green]yes[/]" if r.fits else "[bold red]NO[/]"
    pool = ["-", "-"]
    if r.fits:
        pool = [f"{r.kv_pool_per_gpu_gb:.1f}", f"{r.kda_state_per_gpu_gb:.1f}"]
    row = [
        r.label, r.precision, launch_text(r), str(r.gpus),
        f"{r.total_memory_gb:,.0f}", f"{r.checkpoint_gb:,.2f}", fits,
        f"{r.headroom_gb:,.0f}", f"{r.headroom_per_gpu_gb:.1f}", _experts(r), _min_gpus(r),
        f"{r.per_rank_resident_gb:.1f}", *pool,
    ]
    if with_cost:
        row.append("-" if r.cost_per_hour is None else f"${r.cost_per_hour:,.2f}")
    return row + [note_refs]


COLUMNS: tuple[tuple[str, JustifyMethod], ...] = (
    ("Config", "left"), ("Prec", "left"), ("Launch", "left"), ("GPUs", "right"),
    ("Total\nGB", "right"), ("Ckpt\nGB", "right"), ("Fits", "center"),
    ("Headroom\nGB", "right"), ("Headroom\n/GPU", "right"), ("Expts\n/GPU", "right"),
    ("Min GPUs\nbare/srv", "right"), ("Rank\nGB", "right"), ("KV\n/GPU", "right"),
    ("KDA\n/GPU", "right"),
)


def _footnotes(results: list[SizingResult]) -> dict[str, int]:
    """Each distinct note once, numbered in order of appearance (rows share many notes)."""
    numbers: dict[str, int] = {}
    for r in results:
        for note in r.notes:
            numbers.setdefault(note, len(numbers) + 1)
    return numbers


def render_table(results: list[SizingResult]) -> Table:
    """The plan as a terminal table; notes are numbered footnotes in the caption."""
    with_cost = any(r.cost_per_hour is not None for r in results)
    numbers = _footnotes(results)
    caption = CAPTION.format(
        dup=sizing.DUPLICATED_STACK_PER_RANK_GB, kv=sizing.KV_SHARE_OF_POOL,
        kda=1 - sizing.KV_SHARE_OF_POOL,
    )
    caption += "".join(f"\n\\[{n}] {escape(note)}" for note, n in numbers.items())
    table = Table(
        title="Kimi K3 sizing", caption=caption, caption_justify="left",
        box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False,
    )
    cost: tuple[tuple[str, JustifyMethod], ...] = (("$\n/hour", "right"),) if with_cost else ()
    for header, justify in COLUMNS + cost + (("Notes", "left"),):
        table.add_column(header, justify=justify, no_wrap=header != "Notes")
    for i, r in enumerate(results):
        if i and r.gpu != results[i - 1].gpu:
            table.add_section()
        refs = ",".join(str(numbers[n]) for n in r.notes)
        table.add_row(*_row(r, with_cost, refs))
    return table


def assumptions() -> dict[str, JSON]:
    """The named constants the numbers rest on, so a JSON reader can see them."""
    return {
        "units": "decimal GB",
        "source": "reference/kimi-k3-deployment-guide.txt",
        "routed_experts": sizing.ROUTED_EXPERTS,
        "checkpoint_gb": dict(sizing.CHECKPOINT_GB),
        "published_precisions": list(sizing.PUBLISHED_PRECISIONS),
        "duplicated_stack_per_rank_gb": round(sizing.DUPLICATED_STACK_PER_RANK_GB, 2),
        "per_gpu_reserved_gb": round(sizing.PER_GPU_RESERVED_GB, 2),
        "kv_share_of_pool": round(sizing.KV_SHARE_OF_POOL, 4),
        "sglang_mem_fraction_static": sizing.SGLANG_MEM_FRACTION_STATIC,
        "vllm_gpu_memory_utilization": sizing.VLLM_GPU_MEMORY_UTILIZATION,
        "architectural_max_context": sizing.ARCHITECTURAL_MAX_CONTEXT,
        "kv_bytes_per_token": None,  # not published for K3: context length is not priced in GB
        "headroom": "total HBM minus checkpoint (the guide's naive figure)",
        "min_gpus": "bare weight-fit on nominal memory (the guide's count)",
        "min_gpus_to_serve": "per-rank resident weights inside the static fraction, KV pool > 0",
    }


class PlanDoc(TypedDict):
    configs: list[dict[str, JSON]]   # SizingResult.to_dict each, plan_cmd adds its warnings
    assumptions: dict[str, JSON]


def to_json(results: list[SizingResult]) -> PlanDoc:
    """One JSON-able document: {"configs": [...], "assumptions": {...}}."""
    return {"configs": [r.to_dict() for r in results], "assumptions": assumptions()}

"""The parallel layout and the Ray choice: decided here, from engine kind, node count and
vLLM's executor (engine.executor).

The inventory side (steps, rules, ports) and the LaunchSpec side (argv builders) both ask these
two functions, so a layout change is made once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from k3deploy.engines.inventory_view import InventoryView

# The guide's vLLM layouts: one node (8x B300, DP8+EP8) or two (2x8 B200, DP16+EP16);
# the inventory rules refuse vLLM on more nodes.
VLLM_MAX_NODES = 2


# vLLM across nodes: its multiprocessing executor unless the inventory asks for Ray
# (engine.executor). mp is the engines' own recipe today (vLLM's Kimi K3 multi-node commands,
# vllm-project/vllm PR #23691) and brings no Ray versions, ports or `ray status` lag.
DEFAULT_EXECUTOR = "mp"
EXECUTORS = ("mp", "ray")


def executor_of(engine: str, nnodes: int, executor: str | None) -> str | None:
    """The executor a vLLM launch runs with (None: SGLang, which has no such choice)."""
    if engine != "vllm":
        return None
    return executor or DEFAULT_EXECUTOR


def runs_over_ray(engine: str, nnodes: int, executor: str | None = None) -> bool:
    """Multi-node vLLM with engine.executor ray is the only layout that runs over a Ray
    cluster; one node never does (one `vllm serve` holds every rank)."""
    return nnodes > 1 and executor_of(engine, nnodes, executor) == "ray"


def parallel_layout(engine: str, nnodes: int) -> str:
    """vLLM: data-parallel attention with expert parallelism; SGLang: TP+EP across nodes,
    DP attention on one node (the guide's reference configs)."""
    if engine == "vllm":
        return "dp-ep"
    return "tp-ep" if nnodes > 1 else "dp-attention"


def inventory_runs_over_ray(inv: InventoryView) -> bool:
    return runs_over_ray(inv.engine.kind, len(inv.nodes), inv.engine.executor)


def inventory_executor(inv: InventoryView) -> str | None:
    return executor_of(inv.engine.kind, len(inv.nodes), inv.engine.executor)

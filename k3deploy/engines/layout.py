"""The parallel layout and the Ray choice: decided here, from engine kind and node count.

The inventory side (steps, rules, ports) and the LaunchSpec side (argv builders) both ask these
two functions, so a layout change is made once.
"""

from __future__ import annotations

# The guide's vLLM layouts: one node (8x B300, DP8+EP8) or two over Ray (2x8 B200, DP16+EP16);
# the inventory rules refuse vLLM on more nodes.
VLLM_MAX_NODES = 2


def runs_over_ray(engine: str, nnodes: int) -> bool:
    """Multi-node vLLM is the only layout that runs over a Ray cluster."""
    return engine == "vllm" and nnodes > 1


def parallel_layout(engine: str, nnodes: int) -> str:
    """vLLM: data-parallel attention with expert parallelism; SGLang: TP+EP across nodes,
    DP attention on one node (the guide's reference configs)."""
    if engine == "vllm":
        return "dp-ep"
    return "tp-ep" if nnodes > 1 else "dp-attention"


def inventory_runs_over_ray(inv) -> bool:
    return runs_over_ray(inv.engine.kind, len(inv.nodes))

"""The static memory fraction an engine launch runs with, decided here only.

SGLang's `--mem-fraction-static` (the guide's launch: 0.85) and vLLM's
`--gpu-memory-utilization` (vLLM's own default, 0.90: not in the guide) play the same role: the
share of each GPU the engine claims for weights and its KV pool. The planner (sizing), the
inventory's default, the LaunchSpec's default and verify's memory check all read it here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from k3deploy.engines.inventory_view import FlagValue, InventoryView

SGLANG_MEM_FRACTION_STATIC = 0.85
VLLM_GPU_MEMORY_UTILIZATION = 0.90
FLAGS = {"sglang": "mem-fraction-static", "vllm": "gpu-memory-utilization"}


def default_static_fraction(engine: str) -> float:
    return SGLANG_MEM_FRACTION_STATIC if engine == "sglang" else VLLM_GPU_MEMORY_UTILIZATION


def static_fraction(engine: str, args: Mapping[str, FlagValue], mem_fraction_static: float | None) -> float:
    """What the launch passes: an engine.args override of the engine's flag first (it replaces
    the builder's value), then SGLang's engine.mem_fraction_static, then the engine default."""
    override = args.get(FLAGS[engine])
    if override is not None and not isinstance(override, bool):
        return float(override)
    if engine == "sglang" and mem_fraction_static is not None:
        return mem_fraction_static
    return default_static_fraction(engine)


def inventory_static_fraction(inv: InventoryView) -> float:
    return static_fraction(inv.engine.kind, inv.engine.args, inv.engine.mem_fraction_static)

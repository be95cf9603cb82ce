"""VRAM sizing for Kimi K3, one import for its callers: the arithmetic and its constants
(sizing_math.py), the notes on a sized config (sizing_notes.py) and the planner's entry points
(sizing_plan.py). They import one way only, sizing_plan -> sizing_notes -> sizing_math, never
back (the `sizing` contract in .importlinter); this module imports them and nothing imports it
among them.
"""

from __future__ import annotations

from k3deploy.cluster.sizing_math import *  # noqa: F403 - the constants and arithmetic
from k3deploy.cluster.sizing_math import (SGLANG_MEM_FRACTION_STATIC,  # noqa: F401
                                          VLLM_GPU_MEMORY_UTILIZATION, VLLM_MAX_NODES)
from k3deploy.cluster.sizing_plan import (REFERENCE_CONFIGS, ReferenceConfig, explain,  # noqa: F401
                                          fits_inventory, fits_inventory_of, plan, size_config)

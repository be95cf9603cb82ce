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
# `X as X`: re-exported (what mypy --strict counts as this module's own names)
from k3deploy.cluster.sizing_plan import REFERENCE_CONFIGS as REFERENCE_CONFIGS
from k3deploy.cluster.sizing_plan import ReferenceConfig as ReferenceConfig
from k3deploy.cluster.sizing_plan import explain as explain
from k3deploy.cluster.sizing_plan import fits_inventory as fits_inventory
from k3deploy.cluster.sizing_plan import fits_inventory_of as fits_inventory_of
from k3deploy.cluster.sizing_plan import plan as plan
from k3deploy.cluster.sizing_plan import size_config as size_config

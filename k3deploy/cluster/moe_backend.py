"""SGLang's `--moe-runner-backend`: decided here, and only here.

The guide ("Four 8x H100 Nodes"): "--moe-runner-backend marlin, a W4A16 kernel that dequantizes
MXFP4 weights to 16-bit inline during the matmul. It keeps the memory savings of a 4-bit
checkpoint on hardware with no FP4 tensor cores". So marlin is a property of the precision and
the GPU, not of the GPU alone: an MXFP8 or BF16 checkpoint has no 4-bit weights to dequantize,
and Blackwell runs MXFP4 natively ("the guide gives no backend" there). The planner
(sizing.launch_shape), the inventory (Inventory.moe_runner_backend, read by the LaunchSpec
builder) and the skeleton all ask this function.
"""

from __future__ import annotations

from k3deploy.cluster.gpus import GpuModel, get_gpu

MARLIN = "marlin"


def moe_runner_backend(engine: str, gpu: str | GpuModel, precision: str) -> str | None:
    """The backend k3deploy passes, or None for the engine's own choice (vLLM has no such flag)."""
    if engine != "sglang":
        return None
    return MARLIN if precision == "mxfp4" and not get_gpu(gpu).fp4_native else None

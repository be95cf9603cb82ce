"""Which engine image a node runs: a pinned image always wins; otherwise the SGLang tag
follows the driver's CUDA version (guide Step 4: kimi-k3 is built for CUDA 13, kimi-k3-cu12
for 12.x, a mismatch fails at container start) and vLLM uses the nightly build (the guide:
day-0 K3 support is in nightly; pin a digest in the inventory for production)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from k3deploy.engines.inventory_view import InventoryView

SGLANG_CU13 = "lmsysorg/sglang:kimi-k3"
SGLANG_CU12 = "lmsysorg/sglang:kimi-k3-cu12"
VLLM_DEFAULT = "vllm/vllm-openai:nightly"
DEFAULT_IMAGES = (SGLANG_CU13, SGLANG_CU12, VLLM_DEFAULT)   # what choose_image picks unpinned


class ImageChoiceError(ValueError):
    """No image fits this node's driver."""


def parse_cuda_version(text: str) -> tuple[int, int]:
    """'13.0' (nvidia-smi's "CUDA Version") -> (13, 0)."""
    match = re.fullmatch(r"\s*(\d+)(?:\.(\d+))?\s*", text or "")
    if not match:
        raise ImageChoiceError(f"cannot read a CUDA version from {text!r}")
    return int(match.group(1)), int(match.group(2) or 0)


def inventory_image(inv: InventoryView, cuda_version: str | None) -> str:
    """The image an inventory's nodes run, given a node's CUDA (its pinned image if any)."""
    return choose_image(inv.engine.kind, cuda_version, inv.engine.image)


def choose_image(engine: str, cuda_version: str | None, pinned: str | None = None) -> str:
    if pinned:
        return pinned
    if cuda_version is None:
        raise ImageChoiceError("driver CUDA version unknown and no image pinned")
    major, minor = parse_cuda_version(cuda_version)
    if major < 12:
        raise ImageChoiceError(
            f"driver supports CUDA {major}.{minor}; the K3 images need CUDA 12 or newer "
            "(upgrade the NVIDIA driver, or pin an image built for it)")
    if engine == "sglang":
        return SGLANG_CU13 if major >= 13 else SGLANG_CU12
    if engine == "vllm":
        return VLLM_DEFAULT
    raise ImageChoiceError(f"unknown engine {engine!r}")

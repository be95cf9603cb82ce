"""The engines' compile caches on NVMe: which variables point an engine at them, what they
are keyed by, and where they live. Pure; the node side is remote/compile_cache_dir.py.

Each engine JIT-compiles kernels at start into directories its own variables name (upstream
sources in scripts/tb/standins/engine/kernels.py): SGLang SGLANG_DG_CACHE_DIR (DeepGEMM) and
SGLANG_CACHE_DIR (its torch.compile / piecewise CUDA graphs and FlashInfer autotune),
vLLM VLLM_CACHE_ROOT (its torch.compile cache), both TRITON_CACHE_DIR, FLASHINFER_WORKSPACE_BASE
and TORCHINDUCTOR_CACHE_DIR. k3deploy mounts one NVMe dir per key at CACHE_MOUNT and points
every variable into it, so a relaunched container starts warm.

The key is what invalidates compiled kernels: the image (its id), the GPU model, the driver
and CUDA version, and the engine flags that shape kernels (parallel sizes, backends,
quantization, dtypes). Another key is another dir: nothing stale is ever mounted.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, TypedDict

from k3deploy.remote.protocol import WorkPaths

if TYPE_CHECKING:
    from k3deploy.engines.inventory_view import InventoryView

CACHE_MOUNT = "/k3deploy/compile-cache"
CACHE_VARS = {
    "sglang": (("SGLANG_DG_CACHE_DIR", "deep_gemm"), ("SGLANG_CACHE_DIR", "sglang"),
               ("TRITON_CACHE_DIR", "triton"),
               ("FLASHINFER_WORKSPACE_BASE", "flashinfer"),
               ("TORCHINDUCTOR_CACHE_DIR", "torchinductor")),
    "vllm": (("VLLM_CACHE_ROOT", "vllm"), ("TRITON_CACHE_DIR", "triton"),
             ("FLASHINFER_WORKSPACE_BASE", "flashinfer"),
             ("TORCHINDUCTOR_CACHE_DIR", "torchinductor")),
}
# Flags whose values change the kernels compiled (both engines' spellings).
KERNEL_FLAGS = frozenset({
    "--tp", "--tp-size", "--tensor-parallel-size", "--ep-size", "--expert-parallel-size",
    "--enable-expert-parallel", "--dp", "--dp-size", "--data-parallel-size",
    "--enable-dp-attention", "--attn-dp-size", "--moe-runner-backend",
    "--decode-attention-backend", "--prefill-attention-backend", "--attention-backend",
    "--quantization", "--kv-cache-dtype", "--dtype", "--max-model-len", "--context-length",
    "--compilation-config", "--enable-torch-compile",
})


def cache_env(engine: str) -> list[tuple[str, str]]:
    return [(var, f"{CACHE_MOUNT}/{sub}") for var, sub in CACHE_VARS[engine]]


def kernel_args(argv: list[str]) -> list[list[str]]:
    """The kernel-shaping flags of a serve argv with their values, in order."""
    found, i = [], 0
    while i < len(argv):
        flag = argv[i].split("=", 1)[0]
        if flag in KERNEL_FLAGS:
            has_value = "=" not in argv[i] and i + 1 < len(argv) and not argv[i + 1].startswith("--")
            found.append([argv[i]] + ([argv[i + 1]] if has_value else []))
            i += 1 + has_value
            continue
        i += 1
    return found


class CacheInputs(TypedDict):
    """What the key is the digest of (and what the sealed cache records it was built from)."""
    engine: str
    image_id: str | None
    gpu: str | None
    driver: str | None
    cuda: str | None
    kernel_args: list[list[str]]


def cache_inputs(engine: str, image_id: str | None, gpu: str | None, driver: str | None,
                 cuda: str | None, serve_argv: list[str]) -> CacheInputs:
    return {"engine": engine, "image_id": image_id, "gpu": gpu, "driver": driver, "cuda": cuda,
            "kernel_args": kernel_args(serve_argv)}


def cache_key(inputs: CacheInputs) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def cache_root(inv: InventoryView) -> str:
    return WorkPaths(inv.paths.work).compile_cache


def cache_dir(inv: InventoryView, key: str) -> str:
    return f"{cache_root(inv)}/{key}"

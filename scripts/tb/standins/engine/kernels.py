"""The kernels an engine compiles at start-up, and the on-disk caches that spare it that.

Real engines JIT-compile at start (SGLang: DeepGEMM's kernels, Triton, FlashInfer,
TorchInductor; vLLM: its torch.compile cache too) into per-user cache directories, each
named by its own variable: SGLANG_DG_CACHE_DIR (default ~/.cache/deep_gemm,
sgl-project/sglang python/sglang/srt/environ.py@21ff4b08a19649d55c59ed4bd8383ab9a19e6430),
SGLANG_CACHE_DIR (default ~/.cache/sglang: torch.compile / piecewise CUDA graphs, FlashInfer
autotune; the same environ.py, `SGLANG_CACHE_DIR = EnvStr(os.path.expanduser("~/.cache/sglang"))`
beside SGLANG_FLASHINFER_AUTOTUNE_CACHE),
TRITON_CACHE_DIR (triton-lang/triton python/triton/knobs.py@689edabdbe3b8f2707eb35a1d0ce336f69122ea9),
FLASHINFER_WORKSPACE_BASE (its cache is $BASE/.cache/flashinfer, flashinfer-ai/flashinfer
flashinfer/jit/env.py@05ce648b408ab17c2c31ad7b498b3c28d15b9369), TORCHINDUCTOR_CACHE_DIR
(default /tmp/torchinductor_<user>, pytorch/pytorch
torch/_inductor/runtime/cache_dir_utils.py@24beefe432a78f66c5451435b614c512dfce8fe1),
VLLM_CACHE_ROOT (default ~/.cache/vllm, vllm-project/vllm vllm/envs.py@f218f9c24d224800e0ea4488aa71bd8215c8bdcd).
Inside a container those defaults are in the image's own filesystem: every new container
starts cold (sglang #18823, #29170, #32124 report up to ~30 min to rebuild DeepGEMM's).

The stand-in: one "kernel" file per cache, named by a hash of what shapes it (image, GPU,
driver, CUDA, the kernel-shaping flags), like the engines' own content-addressed entries.
All present: loaded, no compile. Otherwise it "compiles" for node.json
`engine_compile_seconds` and writes them (only where a mount keeps them). A present file with
wrong bytes is loaded as the real loaders do, and the load fails (cuModuleLoadData:
CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"): catching a corrupt cache before
the engine starts is the deployer's job.
"""
import hashlib
import json
import os
import time

from common import EngineExit

CACHES = {
    "sglang": (("SGLANG_DG_CACHE_DIR", "/root/.cache/deep_gemm"),
               ("SGLANG_CACHE_DIR", "/root/.cache/sglang"),
               ("TRITON_CACHE_DIR", "/root/.triton/cache"),
               ("FLASHINFER_WORKSPACE_BASE", "/root"),
               ("TORCHINDUCTOR_CACHE_DIR", "/tmp/torchinductor_root")),
    "vllm": (("VLLM_CACHE_ROOT", "/root/.cache/vllm"),
             ("TRITON_CACHE_DIR", "/root/.triton/cache"),
             ("FLASHINFER_WORKSPACE_BASE", "/root"),
             ("TORCHINDUCTOR_CACHE_DIR", "/tmp/torchinductor_root")),
}
KERNEL_BYTES = 4096


def kernel_hash(ctx, shape):
    node = ctx.node
    facts = {"image": ctx.container.image, "gpu": node.get("gpu_name"), "cuda": node.get("cuda"),
             "driver": node.get("driver"), "shape": shape}
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:20]


def kernel_bytes(digest):
    out, block = b"", digest.encode()
    while len(out) < KERNEL_BYTES:
        block = hashlib.sha256(block).digest()
        out += block
    return f"k3tb-kernel {digest}\n".encode() + out[:KERNEL_BYTES]


def cache_files(ctx, flavor, digest):
    """(variable, host path of this shape's kernel file or None when not on a mount)."""
    found = []
    for var, default in CACHES[flavor]:
        inside = ctx.env.get(var) or default
        host = ctx.container.host_path(inside)
        found.append((var, os.path.join(host, f"k3tb-kernels/kernel.{digest}.bin") if host else None))
    return found


def warm_or_compile(ctx, flavor, shape, log):
    digest = kernel_hash(ctx, shape)
    files = cache_files(ctx, flavor, digest)
    kept = [p for _, p in files if p]
    if len(kept) == len(files) and all(os.path.exists(p) for p in kept):
        for path in kept:
            with open(path, "rb") as fh:
                if fh.read() != kernel_bytes(digest):
                    raise EngineExit(f"RuntimeError: CUDA error: device kernel image is invalid "
                                     f"(loading {path})")
        log(f"[stand-in] kernel caches hit: {len(kept)} cached kernel sets for {digest} "
            "loaded, no compile")
        return
    missing = [var for var, p in files if not p or not os.path.exists(p)]
    seconds = float(ctx.node.get("engine_compile_seconds", 0) or 0)
    log(f"[stand-in] kernel caches miss ({', '.join(missing)}): compiling kernels for "
        f"{digest}, {seconds:g}s")
    time.sleep(seconds)
    for path in kept:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(kernel_bytes(digest))
        os.replace(tmp, path)
    log(f"[stand-in] kernels compiled in {seconds:g}s; kept in {len(kept)} of {len(files)} "
        "caches")

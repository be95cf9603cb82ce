"""Finding the model in the container's Hugging Face cache, checking every shard, and the
weight load (every shard read, paced over the node's engine_load_seconds: diskread.py).

A shard is complete when its size equals 8 + header length + the largest data_offsets end in
its safetensors header, which is exactly what a reader needs to find every tensor.
"""
import json
import os
import re
import time

import diskread
from common import EngineExit

DEFAULT_HF_HOME = "/root/.cache/huggingface"
# The published moonshotai/Kimi-K3 checkpoint and what every rank keeps a copy of (guide:
# 59.6 GB resident per rank on 4x8 H100 = 1,560.94 GB / 32 + this duplicated stack).
K3_CHECKPOINT_GB = 1560.94
K3_DUPLICATED_PER_RANK_GB = 10.82
SHA_RE = re.compile(r"^[0-9a-f]{40}$")


class LoadError(Exception):
    """A shard the loader cannot read; message names the shard."""


def hub_cache(env):
    if env.get("HF_HUB_CACHE"):
        return env["HF_HUB_CACHE"]
    return os.path.join(env.get("HF_HOME") or DEFAULT_HF_HOME, "hub")


def _offline(env):
    return str(env.get("HF_HUB_OFFLINE", "")).lower() in ("1", "true", "yes", "on")


def not_cached_error(env):
    """What transformers/huggingface_hub say when the model is not in the cache."""
    if _offline(env):
        return ("huggingface_hub.errors.LocalEntryNotFoundError: Cannot find an appropriate "
                "cached snapshot folder for the specified revision on the local disk and outgoing "
                "traffic has been disabled. To enable repo look-ups and downloads online, pass "
                "'local_files_only=False' as input.")
    endpoint = env.get("HF_ENDPOINT") or "https://huggingface.co"
    return (f"OSError: We couldn't connect to '{endpoint}' to load the files, and couldn't find "
            "them in the cached files.\nCheck your internet connection or see how to run the "
            "library in offline mode at "
            "'https://huggingface.co/docs/transformers/installation#offline-mode'.")


class Snapshot:
    """One model snapshot: where it is inside the container and on the node."""

    def __init__(self, repo_id, inside_dir, host_dir):
        self.repo_id, self.inside_dir, self.host_dir = repo_id, inside_dir, host_dir
        self.config = _read_json(os.path.join(host_dir, "config.json"))
        index = _read_json(os.path.join(host_dir, "model.safetensors.index.json")) or {}
        self.shards = sorted(set((index.get("weight_map") or {}).values()))

    @property
    def is_kimi_k3(self):
        return (self.repo_id or "").lower().endswith("kimi-k3")

    def max_context(self):
        cfg = self.config or {}
        text = cfg.get("text_config") or {}
        return cfg.get("max_position_embeddings") or text.get("max_position_embeddings")


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _snapshot_sha(repo_host_dir, revision):
    if revision and SHA_RE.match(revision):
        return revision
    try:
        with open(os.path.join(repo_host_dir, "refs", revision or "main"), encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return None


def resolve(ctx, model, revision=None, dummy=False):
    """The snapshot an engine would load for `model` (a repo id or a path in the container).
    dummy (`--load-format dummy`): config, tokenizer and code are needed, no weight file."""
    if model.startswith("/") or model.startswith("."):
        host = ctx.container.host_path(os.path.normpath(model))
        if host is None or not os.path.isfile(os.path.join(host, "config.json")):
            raise EngineExit(f"OSError: {model} does not appear to have a file named "
                             "config.json.")
        snap = Snapshot(None, model, host)
    else:
        inside_repo = os.path.join(hub_cache(ctx.env), "models--" + model.replace("/", "--"))
        host_repo = ctx.container.host_path(inside_repo)
        sha = _snapshot_sha(host_repo, revision) if host_repo else None
        host = os.path.join(host_repo, "snapshots", sha) if sha else None
        if not host or not os.path.isfile(os.path.join(host, "config.json")):
            raise EngineExit(not_cached_error(ctx.env))
        snap = Snapshot(model, os.path.join(inside_repo, "snapshots", sha), host)
    if not snap.shards and not dummy:
        raise EngineExit(f"RuntimeError: Cannot find any model weights with `{snap.inside_dir}`"
                         " (model.safetensors.index.json missing or empty)")
    return snap


def shard_problem(path):
    """None when the shard is complete, else what is wrong with it."""
    if not os.path.exists(path):
        return "missing"
    size = os.path.getsize(path)
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            length = int.from_bytes(head, "little") if len(head) == 8 else -1
            if length < 0 or 8 + length > size or length > 100 * 2**20:
                return f"incomplete: {size} bytes, safetensors header cut short"
            header = json.loads(f.read(length))
    except (OSError, ValueError) as e:
        return f"unreadable safetensors header ({e})"
    ends = [v["data_offsets"][1] for k, v in header.items()
            if k != "__metadata__" and isinstance(v, dict) and "data_offsets" in v]
    expected = 8 + length + max(ends, default=0)
    if size != expected:
        return f"incomplete: {size} of {expected} bytes"
    return None


def load_error_text(snapshot, shard, problem):
    path = os.path.join(snapshot.inside_dir, shard)
    if problem == "missing":
        first = f"FileNotFoundError: No such file or directory: \"{path}\""
    else:
        first = "safetensors_rust.SafetensorError: Error while deserializing header: " \
                "MetadataIncompleteBuffer"
    return (f"{first}\nOSError: Checkpoint shard {path} is {problem.split(':')[0]}"
            f" ({problem}); the snapshot is not complete")


def load(snapshot, seconds, progress, oom_at=None):
    """Read the shards as a loader does, taking `seconds` in all (diskread.py: every byte
    read, at a disk's pace, the CPU busy). progress(done, total, elapsed) is called about
    every 10%. oom_at (0..1): the fraction at which the GPU runs out of memory
    (LoadError('oom')). A bad shard raises LoadError naming it."""
    total = len(snapshot.shards)
    paths = [os.path.join(snapshot.host_dir, shard) for shard in snapshot.shards]
    reads = diskread.PacedLoad(sum(_size(p) for p in paths), seconds)
    start, next_mark = time.monotonic(), 1
    progress(0, total, 0.0)   # tqdm draws its bar once when it is created
    for done, (shard, path) in enumerate(zip(snapshot.shards, paths), 1):
        problem = shard_problem(path)
        if problem:
            raise LoadError(load_error_text(snapshot, shard, problem))
        if oom_at is not None and done / total >= oom_at:
            raise LoadError("oom")
        reads.read(path)
        if done == total:
            reads.finish()
        if done * 10 // total >= next_mark or done == total:
            progress(done, total, time.monotonic() - start)
            next_mark = done * 10 // total + 1


def _size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


# `--load-format dummy` (SGLang python/sglang/srt/model_loader/loader.py DummyModelLoader;
# vLLM model_executor/model_loader/dummy_loader.py): the model is built on the device at its
# real size, then initialize_dummy_weights fills every parameter with uniform random values
# (-1e-3..1e-3) in place; download_model does nothing and no checkpoint file is opened, so the
# load takes the time of a device fill, and the memory reached is the real load's.
DUMMY_LOAD_SECONDS = 0.3


def load_dummy(oom_at=None):
    """The dummy loader: no shard read, no bar; out of memory as the real load when the
    weights do not fit (the allocation, not the fill, is what fails)."""
    if oom_at is not None:
        raise LoadError("oom")
    time.sleep(DUMMY_LOAD_SECONDS)


# The loaders' tqdm descriptions. SGLang < 0.5.10 and vLLM: safetensors_weights_iterator;
# SGLang >= 0.5.10 turned its multi-thread loader on by default (sgl-project/sglang#20289,
# multi_thread_safetensors_weights_iterator in python/sglang/srt/model_loader/weight_utils.py).
SAFETENSORS_DESC = "Loading safetensors checkpoint shards"
MULTI_THREAD_DESC = "Multi-thread loading shards"


def progress_line(done, total, elapsed, desc=SAFETENSORS_DESC):
    """One tqdm update in the loaders' _BAR_FORMAT: "{desc}: {percentage:3.0f}% Completed |
    {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}]"; before the first item tqdm
    shows "?" for what it cannot know yet."""
    clock = lambda s: f"{int(s) // 60:02d}:{int(s) % 60:02d}"  # noqa: E731
    head = f"{desc}: {done * 100 // total:3d}% Completed | {done}/{total} [{clock(elapsed)}<"
    if done == 0 or elapsed <= 0:
        return head + "?, ?it/s]"
    rate = done / elapsed
    speed = f"{rate:5.2f}it/s" if rate >= 1 else f"{1 / rate:5.2f}s/it"
    return head + f"{clock((total - done) / rate)}, {speed}]"


def resident_gb_per_gpu(world_gpus):
    """K3 weights one GPU holds: its slice of the checkpoint plus the stack every rank copies."""
    return K3_CHECKPOINT_GB / max(world_gpus, 1) + K3_DUPLICATED_PER_RANK_GB


def memory_fit(snapshot, world_gpus, gpu_mem_mib):
    """(need_gb, physical_gb, oom_at): the K3 weights one GPU must hold, the GPU's size, and
    the fraction of the load at which it runs out (None when the weights fit)."""
    physical = gpu_mem_mib * 1.048576 / 1000
    need = resident_gb_per_gpu(world_gpus) if snapshot.is_kimi_k3 else 0.0
    return need, physical, (physical / need if need > physical else None)


def oom_text(gpu_mem_mib, need_gb, physical_gb):
    return (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB. GPU 0 has "
            f"a total capacity of {gpu_mem_mib / 1024:.2f} GiB of which 311.56 MiB is free. "
            f"(The weights need about {need_gb:.1f} GB per GPU; the GPU has "
            f"{physical_gb:.1f} GB.)")

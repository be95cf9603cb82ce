"""The dry-fire's launch: the real launch's spec with dummy weights, and how its container is
told from the real one. Pure.

`--load-format dummy` exists in both engines (SGLang python/sglang/srt/server_args.py
LOAD_FORMAT_CHOICES, loader python/sglang/srt/model_loader/loader.py DummyModelLoader; vLLM
vllm/config/load.py `load_format`, loader vllm/model_executor/model_loader/dummy_loader.py):
the model is built on the GPUs at its real size from config.json and the model's code, then
every parameter is filled with uniform random values (weight_utils initialize_dummy_weights);
`download_model` does nothing and no checkpoint file is read. So the group forms, NCCL
initialises, every rank holds the real weight bytes and its KV pool, kernels compile and the
server answers, with only the small files on disk. The kernels depend on shapes and flags, not
on weight values: `--load-format` is not a kernel flag (engines/compile_cache_key.py KERNEL_FLAGS),
so the dry-fire's compile-cache key is the real launch's.
"""

from __future__ import annotations

import dataclasses

from k3deploy.engines.spec import LaunchSpec
from k3deploy.facts.docker import Container

DRY_FIRE_LABEL = "k3deploy.dry-fire"
# SGLang's dummy loader refuses any loader option ("Model loader extra config is not supported
# for load format ...": 0.5.16 wheel srt/model_loader/loader.py:1404 DummyModelLoader); a
# dry-fire reads no checkpoint, so the real launch's loader option goes.
DUMMY_ARGS = {"load-format": "dummy", "model-loader-extra-config": None}


def dry_fire_spec(spec: LaunchSpec) -> LaunchSpec:
    """The real launch's spec (before its config label) with dummy weights, marked."""
    return dataclasses.replace(spec, extra_args={**spec.extra_args, **DUMMY_ARGS},
                               labels={**spec.labels, DRY_FIRE_LABEL: "1"})


def is_dry_fire(container: Container | None) -> bool:
    """The engine container (facts/docker.py) is a dry-fire's."""
    return container is not None and container.labels.get(DRY_FIRE_LABEL) == "1"

"""docker run / exec / rm argv shared by the SGLang and vLLM launches.

Only non-secret values ever appear here: the API key reaches SGLang as a file in the
read-only secrets mount, and vLLM through `--env-file` (docker reads that file itself).
"""

from __future__ import annotations

from k3deploy.engines import fabric  # noqa: I001
from k3deploy.engines.compile_cache_key import CACHE_MOUNT, cache_env
from k3deploy.engines.spec import (HF_CACHE_MOUNT, NCCL_LOG_MOUNT, SECRETS_MOUNT, SERVE_LOG_MOUNT,
                                   VLLM_ENV_FILE, LaunchSpec, SpecError)

VLLM_READY_TIMEOUT_S = 3600
# The guide's Step 6 container flags, in its order.
_RUN_FLAGS = ["--gpus", "all", "--network", "host", "--ipc=host", "--shm-size", "32g",
              "--ulimit", "memlock=-1", "--ulimit", "stack=67108864"]


def engine_env(spec: LaunchSpec) -> list[tuple[str, str]]:
    """The container environment, defaults first (guide order), then extra_env
    (override in place; None removes; new names sorted)."""
    env = _sglang_env(spec) if spec.engine == "sglang" else _vllm_env(spec)
    if spec.compile_cache_host_dir is not None:
        env += cache_env(spec.engine)
    # Weights are already on local NVMe, so the engine never needs (or sees) the HF token.
    env.append(("HF_HUB_OFFLINE", "1"))
    overrides = dict(spec.extra_env)
    merged = [(k, overrides.pop(k, v)) for k, v in env]
    merged += sorted(overrides.items())
    return [(k, v) for k, v in merged if v is not None]


def _sglang_env(spec: LaunchSpec) -> list[tuple[str, str]]:
    return [
        ("NCCL_CUMEM_ENABLE", "1"),
        ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),
        ("SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK", "0"),
        ("SGLANG_K3_ATTN_RES_MODE", "jit"),
        ("SGLANG_MOE_FUSED_GATE_RADIX", "1"),
        ("SGLANG_HOST_IP", spec.self_address),
        ("NCCL_SOCKET_IFNAME", spec.nic),
        ("GLOO_SOCKET_IFNAME", spec.nic),
        *fabric.env(spec.ib_hcas, spec.ib_disable, spec.nccl_log_host_dir is not None),
    ]


def _vllm_env(spec: LaunchSpec) -> list[tuple[str, str]]:
    # VLLM_HOST_IP: the address vLLM (and, with the Ray DP backend, the DP master) binds
    # on a multi-NIC host; vLLM's run_cluster.sh passes it per node for the same reason.
    # VLLM_ENGINE_READY_TIMEOUT_S bounds how long the API server waits for its engine cores'
    # ready message, which comes only after the weights are loaded (envs.py: default 600 s;
    # core_client.py MPClient). A 1.56 TB load takes 30-40 minutes (vllm-project/vllm#38476),
    # so vLLM's own K3 recipe sets 3600 (vllm-project/recipes Kimi-K3, vLLM's K3 post
    # 2026-07-27-k3.md); k3deploy's wait, not this clock, judges whether a load still moves.
    return [
        ("VLLM_ENGINE_READY_TIMEOUT_S", str(VLLM_READY_TIMEOUT_S)),
        ("VLLM_HOST_IP", spec.self_address),
        ("NCCL_SOCKET_IFNAME", spec.nic),
        ("GLOO_SOCKET_IFNAME", spec.nic),
        *fabric.env(spec.ib_hcas, spec.ib_disable, spec.nccl_log_host_dir is not None),
    ]


def docker_run_argv(spec: LaunchSpec, cmd: list[str], *, entrypoint: str | None = None,
                    env_file: bool = False) -> list[str]:
    """`docker run -d` of the engine container; `cmd` follows the image.

    entrypoint: replaces the image's entrypoint (vllm/vllm-openai has one).
    env_file: pass `<secrets_host_dir>/vllm.env` (vLLM's VLLM_API_KEY) with --env-file.
    """
    argv = ["docker", "run", "-d", "--name", spec.container_name, *_RUN_FLAGS,
            *fabric.run_flags(spec.ib_hcas),
            "-v", f"{spec.hf_cache_host_path}:{HF_CACHE_MOUNT}"]
    if spec.secrets_host_dir is not None and spec.engine == "sglang":
        argv += ["-v", f"{spec.secrets_host_dir}:{SECRETS_MOUNT}:ro"]
    if spec.compile_cache_host_dir is not None:
        argv += ["-v", f"{spec.compile_cache_host_dir}:{CACHE_MOUNT}"]
    if spec.serve_log_host_dir is not None:
        argv += ["-v", f"{spec.serve_log_host_dir}:{SERVE_LOG_MOUNT}"]
    if spec.nccl_log_host_dir is not None:
        argv += ["-v", f"{spec.nccl_log_host_dir}:{NCCL_LOG_MOUNT}"]
    for key, value in engine_env(spec):
        argv += ["--env", f"{key}={value}"]
    if env_file:
        argv += ["--env-file", vllm_env_host_path(spec)]
    for key, value in sorted(spec.labels.items()):
        argv += ["--label", f"{key}={value}"]
    if entrypoint is not None:
        argv += ["--entrypoint", entrypoint]
    return argv + [spec.image, *cmd]


def vllm_env_host_path(spec: LaunchSpec) -> str:
    if spec.secrets_host_dir is None:
        raise SpecError("no secrets_host_dir: there is no vLLM env file")
    return f"{spec.secrets_host_dir}/{VLLM_ENV_FILE}"


def docker_exec_argv(container: str, cmd: list[str], *, detach: bool = False) -> list[str]:
    return ["docker", "exec", *(["-d"] if detach else []), container, *cmd]


def docker_rm_argv(container: str) -> list[str]:
    return ["docker", "rm", "-f", container]


def docker_logs_argv(container: str, tail: int | None = None) -> list[str]:
    return ["docker", "logs", *(["--tail", str(tail)] if tail is not None else []), container]

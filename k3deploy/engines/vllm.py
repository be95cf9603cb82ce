"""vLLM command lines: DP+EP on one node (the guide's B300 cell), or across nodes (the guide's
2x8 B200 cell) with vLLM's multiprocessing executor (engine.executor mp: one `vllm serve` per
node, the API node's first, the others --headless) or over Ray (the Ray data-parallel backend).

The API key reaches vLLM as VLLM_API_KEY from a 0600 `--env-file` (read by the docker
CLI on the node, not passed in argv); `docker exec` processes inherit the container's env.
"""

from __future__ import annotations

from k3deploy.engines.docker import docker_exec_argv, docker_run_argv
from k3deploy.engines.layout import runs_over_ray
from k3deploy.engines.parsers import MODEL_PARSER
from k3deploy.engines.sglang import check_api_key
from k3deploy.engines.spec import (SERVE_LOG_FILE, SERVE_LOG_MOUNT, FlagValue, LaunchSpec,
                                   SpecError, render_flags)

# The output of a detached `docker exec` reaches no log: `docker logs` holds the STDOUT and
# STDERR of the container's main process (ENTRYPOINT/CMD) only (docs.docker.com/engine/
# logging/, and .../commandline/attach/). So the serve writes it to a file in the node's
# mounted serve-logs dir; each start begins the file anew. Nothing but this log tells that the
# detached serve exited (Ray only frees what it held, and one that failed early held nothing):
# the shell ends it with SERVE_EXITED and the status.
SERVE_EXITED = "k3deploy: vllm serve exited with status"
_SERVE_LOG = f"{SERVE_LOG_MOUNT}/{SERVE_LOG_FILE}"
_TO_SERVE_LOG = f'"$@" >{_SERVE_LOG} 2>&1; echo "{SERVE_EXITED} $?" >>{_SERVE_LOG}'


def vllm_serve_args(spec: LaunchSpec) -> list[str]:
    """The arguments after `vllm serve`: the model, then the flags."""
    if spec.engine != "vllm":
        raise SpecError(f"not a vLLM spec: engine {spec.engine}")
    flags: list[tuple[str, FlagValue]] = [("revision", spec.revision_sha),
             ("data-parallel-size", spec.world_size), ("enable-expert-parallel", True),
             *_multi_node_flags(spec), *_optional_flags(spec),
             ("host", "0.0.0.0"), ("port", spec.serve_port),
             # --enable-auto-tool-choice: without it vLLM answers 400 to any request that
             # carries tools with tool_choice auto (the OpenAI default), parser or not.
             ("tool-call-parser", MODEL_PARSER), ("enable-auto-tool-choice", True),
             ("reasoning-parser", MODEL_PARSER),
             ("max-model-len", spec.context_length), ("trust-remote-code", True),
             ("served-model-name", spec.model_name)]
    return [spec.model_repo, *render_flags(flags, spec.extra_args)]


def _multi_node_flags(spec: LaunchSpec) -> list[tuple[str, FlagValue]]:
    if spec.nnodes == 1:
        return []
    if uses_ray(spec):
        return _ray_dp_flags(spec)
    return _mp_dp_flags(spec)


def _mp_dp_flags(spec: LaunchSpec) -> list[tuple[str, FlagValue]]:
    """docs/serving/data_parallel_deployment.md (internal load balancing, several nodes): every
    node runs `vllm serve` with the global --data-parallel-size and its own ranks' count; all
    name the API node's --data-parallel-address and --data-parallel-rpc-port (its handshake
    socket, vllm/v1/engine/utils.py); the others add --data-parallel-start-rank and --headless
    (engine cores only, no API server: entrypoints/cli/serve.py run_headless)."""
    flags: list[tuple[str, FlagValue]] = [
        ("data-parallel-size-local", spec.gpus_per_node),
        ("data-parallel-address", spec.head_address),
        ("data-parallel-rpc-port", spec.dist_init_port)]
    if not spec.is_head:
        flags += [("data-parallel-start-rank", spec.node_rank * spec.gpus_per_node),
                  ("headless", True)]
    return flags


def _ray_dp_flags(spec: LaunchSpec) -> list[tuple[str, FlagValue]]:
    # With --data-parallel-backend ray one `vllm serve` on the head starts every DP rank
    # through the Ray cluster; without --data-parallel-size-local vLLM would try to place
    # all of them on the head node (docs/serving/data_parallel_deployment.md, arg_utils).
    return [("data-parallel-size-local", spec.gpus_per_node),
            ("data-parallel-backend", "ray")]


def _optional_flags(spec: LaunchSpec) -> list[tuple[str, FlagValue]]:
    chunked = spec.chunked_prefill_tokens
    return [("enable-chunked-prefill", True if chunked else None),
            ("max-num-batched-tokens", chunked),
            ("mm-encoder-tp-mode", spec.mm_encoder_tp_mode)]


def vllm_launch_argv(spec: LaunchSpec) -> list[str]:
    """One node, or one node's share under the mp executor: `docker run ... --entrypoint vllm
    IMAGE serve MODEL ...`. The vllm/vllm-openai image has its own entrypoint, which is
    replaced here. Only the API node (rank 0) serves: a headless node's spec has no key
    (spec_from_inventory.py)."""
    if uses_ray(spec):
        raise SpecError("multi-node vLLM with executor ray runs over Ray: use "
                        "ray_head_container_argv, ray_worker_container_argv and vllm_exec_serve_argv")
    return docker_run_argv(spec, ["serve", *vllm_serve_args(spec)], entrypoint="vllm",
                           env_file=spec.secrets_host_dir is not None)


def uses_ray(spec: LaunchSpec) -> bool:
    return runs_over_ray(spec.engine, spec.nnodes, spec.executor)


def vllm_exec_serve_argv(spec: LaunchSpec) -> list[str]:
    """Multi-node: `docker exec -d NAME sh -c '"$@" >LOG 2>&1; echo ...' sh vllm serve ...` in
    the Ray head container, its output in the mounted serve log (serve_log_host_path)."""
    if not spec.is_head:
        raise SpecError(f"vllm serve runs on the head only, not rank {spec.node_rank}")
    if spec.serve_log_host_dir is None:
        raise SpecError("no serve_log_host_dir: the detached serve would keep no output")
    serve = ["sh", "-c", _TO_SERVE_LOG, "sh", "vllm", "serve", *vllm_serve_args(spec)]
    return docker_exec_argv(spec.container_name, serve, detach=True)


def without_serve_log(cmd: list[str]) -> list[str]:
    """The command inside vllm_exec_serve_argv's output redirection (others as they are)."""
    return cmd[4:] if cmd[:3] == ["sh", "-c", _TO_SERVE_LOG] else cmd


def serve_log_host_path(serve_log_host_dir: str) -> str:
    """Where the exec'd serve's output is on the head node."""
    return f"{serve_log_host_dir}/{SERVE_LOG_FILE}"


def vllm_secret_env(api_key: str) -> str:
    """Text of the 0600 env file given to `docker run --env-file`."""
    check_api_key(api_key)
    return f"VLLM_API_KEY={api_key}\n"

"""SGLang command lines: the guide's 4x8 H100 cell (tp-ep) and its single-node B300
cell (dp-attention).

The API key goes into a YAML file read with `--config` (SGLang's server-args config
file: keys are the long flag names, CLI flags win over the file), so it is never in argv.
"""

from __future__ import annotations

import yaml

from k3deploy.engines.docker import docker_run_argv
from k3deploy.engines.parsers import MODEL_PARSER
from k3deploy.engines.sglang_defaults import decode_hang_flags
from k3deploy.engines.spec import (SECRETS_MOUNT, SGLANG_SECRET_FILE, FlagValue, LaunchSpec,
                                   SpecError, render_flags)


def sglang_serve_args(spec: LaunchSpec) -> list[str]:
    """The arguments after `sglang serve` (the guide's K3_ARGS for this node)."""
    if spec.engine != "sglang":
        raise SpecError(f"not an SGLang spec: engine {spec.engine}")
    flags = _head_flags(spec) + _parallel_flags(spec) + _tail_flags(spec)
    argv = render_flags(flags, spec.extra_args)
    if spec.secrets_host_dir is not None:
        argv += ["--config", sglang_secret_container_path()]
    return argv


def _head_flags(spec: LaunchSpec) -> list[tuple[str, FlagValue]]:
    # --revision pins the engine to exactly the commit k3deploy downloaded and verified.
    return [("model-path", spec.model_repo), ("revision", spec.revision_sha),
            ("trust-remote-code", True)]


def _parallel_flags(spec: LaunchSpec) -> list[tuple[str, FlagValue]]:
    if spec.layout == "tp-ep":
        return [("tp-size", spec.world_size), ("ep-size", spec.world_size),
                *_multi_node_flags(spec),
                ("moe-runner-backend", spec.moe_runner_backend),
                ("decode-attention-backend", "flashmla")]
    # dp-attention, the guide's single-node B300 cell (multi-node only if asked for).
    return [("tp", spec.world_size), ("ep-size", spec.world_size),
            ("enable-dp-attention", True), ("dp", spec.world_size),
            ("moe-runner-backend", spec.moe_runner_backend),
            *(_multi_node_flags(spec) if spec.nnodes > 1 else [])]


def _multi_node_flags(spec: LaunchSpec) -> list[tuple[str, FlagValue]]:
    return [("nnodes", spec.nnodes), ("node-rank", spec.node_rank),
            ("dist-init-addr", f"{spec.head_address}:{spec.dist_init_port}")]


def _tail_flags(spec: LaunchSpec) -> list[tuple[str, FlagValue]]:
    return [("mem-fraction-static", spec.mem_fraction_static),
            ("dist-timeout", spec.dist_timeout),
            ("reasoning-parser", MODEL_PARSER), ("tool-call-parser", MODEL_PARSER),
            ("host", "0.0.0.0"), ("port", spec.serve_port),
            ("context-length", spec.context_length),
            ("served-model-name", spec.model_name),
            # Every rank's scheduler on /metrics (node rank >= 1: its health server), so the
            # guard sees which rank stopped advancing (remote/guard_progress.py).
            ("enable-metrics", True), ("enable-metrics-for-all-schedulers", True),
            # The cookbook image's first multi-node decode outlives the scheduler watchdog
            # (sgl-project/sglang#39568): the working launch's flags, where the image's SGLang
            # accepts them (engines/sglang_defaults.py).
            *decode_hang_flags(spec.image)]


def sglang_launch_argv(spec: LaunchSpec) -> list[str]:
    """The full `docker run ... IMAGE sglang serve ...` for this node."""
    return docker_run_argv(spec, ["sglang", "serve", *sglang_serve_args(spec)])


def sglang_secret_container_path() -> str:
    return f"{SECRETS_MOUNT}/{SGLANG_SECRET_FILE}"


def sglang_secret_host_path(spec: LaunchSpec) -> str:
    if spec.secrets_host_dir is None:
        raise SpecError("no secrets_host_dir: there is no SGLang secret file")
    return f"{spec.secrets_host_dir}/{SGLANG_SECRET_FILE}"


def sglang_secret_config(api_key: str) -> str:
    """Text of the 0600 `--config` file: `api-key: <key>` (SGLang turns each key into
    `--<key> <value>` inside the process, so it never reaches the process argv)."""
    check_api_key(api_key)
    return yaml.safe_dump({"api-key": api_key}, default_flow_style=False)


def check_api_key(api_key: str) -> None:
    """Printable ASCII without spaces: safe in a YAML scalar and a docker env-file line."""
    if not api_key or not all(33 <= ord(c) < 127 for c in api_key):
        raise SpecError("API key must be non-empty printable ASCII without spaces")

"""Testbed profiles: node behaviour as a given upstream version prints and does it.

A profile belongs to one group (docker, docker-unit, toolkit, nvme, nvme-fs, sglang, vllm, ray,
ray-gpus, gpu, sglang-decode, engine-start, fabric);
a node has at most one profile per group, and the group's default when none is named. A
profile's `settings` are written into the node's `node.json` (top-level keys) where the
stand-ins read them; `source` says where upstream the behaviour comes from, so that a
stand-in's behaviour is traceable to the real tool, never to what k3deploy expects.

`--profile A,B` applies to every node, `--node NAME:profile=A` to one (after --profile, so it
wins within its group). `scripts/testbed profiles` lists them.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Profile:
    name: str
    group: str
    summary: str
    source: str
    settings: dict = field(default_factory=dict)
    default: bool = False


def _p(name, group, summary, source, settings=None, default=False) -> Profile:
    return Profile(name, group, summary, source, dict(settings or {}), default)


# Settings keys are read by the stand-ins (scripts/tb/standins/README.md, "Profiles").
PROFILES: dict[str, Profile] = {p.name: p for p in (
    _p("docker-28-overlay2", "docker",
       "Docker 28 with the legacy overlay2 image store (images under data-root)",
       "moby/moby v28.5.1 (f8215cc2): distribution/pull_v2.go (tag pull adds repo@digest, digest "
       "pull only the digest), daemon/images/image_inspect.go (RepoTags tags, RepoDigests "
       "digests, familiar form); api/common.go (API 1.51)",
       {"docker_version": "28.5.1", "image_store": "overlay2"}, default=True),
    _p("docker-29-containerd", "docker",
       "Docker 29 fresh install: the containerd image store (images under /var/lib/containerd)",
       "moby/moby docker-v29.1.2 (de45c2ae): daemon/containerd/image_inspect.go "
       "(collectRepoTagsAndDigests), daemon/containerd/service.go (DriverStatus driver-type "
       "io.containerd.snapshotter.v1), daemon/command/daemon.go (system containerd used when "
       "its socket exists); docs.docker.com/engine/storage/containerd (default on fresh 29.0 "
       "installs; compressed and unpacked copies)",
       {"docker_version": "29.1.2", "image_store": "containerd"}),
    _p("dockerd-flag-data-root", "docker-unit",
       "docker.service started with `--data-root /var/lib/docker-flag` (a drop-in's ExecStart): "
       "dockerd refuses data-root in daemon.json too; restarts in a row hit the start limit",
       "moby/moby docker-v29.1.2 (de45c2ae): daemon/config/config.go "
       "findConfigurationConflicts (specified both as a flag and in the configuration file), "
       "contrib/init/systemd/docker.service (StartLimitBurst=3, StartLimitIntervalSec=60, "
       "Restart=always, RestartSec=2); systemd.unit(5) start rate limiting, systemctl(1) "
       "reset-failed",
       {"dockerd_flags": ["--data-root", "/var/lib/docker-flag"]}),
    _p("toolkit-runtime", "toolkit",
       "NVIDIA Container Toolkit configured with `nvidia-ctk runtime configure` (an `nvidia` runtime)",
       "NVIDIA/nvidia-container-toolkit d34b3046 pkg/config/engine/docker/docker.go AddRuntime "
       "(daemon.json runtimes.nvidia {path: nvidia-container-runtime, args: []})",
       {"nvidia_toolkit": True, "nvidia_runtime_entry": True}, default=True),
    _p("toolkit-hook-only", "toolkit",
       "toolkit installed, no `nvidia` runtime entry; `--gpus` works through the hook on PATH",
       "moby/moby daemon/devices_nvidia_linux.go@docker-v29.1.2 init(): the gpu device driver "
       "registered when exec.LookPath(\"nvidia-container-runtime-hook\") succeeds",
       {"nvidia_toolkit": True, "nvidia_runtime_entry": False}),
    _p("no-toolkit", "toolkit",
       "no NVIDIA Container Toolkit: `docker run --gpus` fails",
       "moby/moby daemon/devices.go + daemon/errors.go@docker-v29.1.2 (could not select device "
       "driver \"\" with capabilities: [[gpu]])",
       {"nvidia_toolkit": False, "nvidia_runtime_entry": False}),
    _p("nvme-plain", "nvme", "the NVMe filesystem mounted directly at its path",
       "util-linux mount(8)", {"nvme_symlinked": False}, default=True),
    _p("nvme-symlinked", "nvme",
       "the NVMe mount reached through a symlink (dockerd reports data-root canonicalised)",
       "moby/moby daemon/daemon.go@docker-v29.1.2 CreateDaemonRoot/resolveSymlinkedDirectory "
       "(filepath.Abs + filepath.EvalSymlinks; DockerRootDir reports the result)",
       {"nvme_symlinked": True}),
    _p("nvme-fs-dtype", "nvme-fs", "the NVMe's filesystem has d_type (ext4, xfs with ftype=1)",
       "mkfs.xfs(8) -n ftype (1 by default since xfsprogs 3.2.3)", {"no_dtype_under": None},
       default=True),
    _p("nvme-xfs-ftype0", "nvme-fs",
       "the NVMe is xfs made with ftype=0 (no d_type): dockerd with storage-driver overlay2 in "
       "daemon.json refuses a data-root there and exits 1",
       "moby/moby v28.5.1: daemon/graphdriver/overlay2/overlay.go Init, "
       "daemon/graphdriver/overlayutils/overlayutils.go ErrDTypeNotSupported, "
       "layer/layer_store.go NewStoreFromOptions, cmd/dockerd/daemon.go (failed to start "
       "daemon), cmd/dockerd/docker.go onError (the bare stderr line); transcript "
       "jmutai/k8s-pre-bootstrap#3",
       {"no_dtype_under": "/mnt/nvme"}),
    _p("sglang-0.5.4", "sglang",
       "SGLang 0.5.4: 'Loading safetensors checkpoint shards' on global rank 0; /get_server_info",
       "python/sglang/srt/model_loader/weight_utils.py safetensors_weights_iterator (before "
       "sgl-project/sglang#20289); entrypoints/engine.py, http_server.py",
       {"sglang_version": "0.5.4"}),
    _p("sglang-0.5.16", "sglang",
       "SGLang 0.5.16 release behaviour (the kimi-k3 image's base; the image itself runs SGLang "
       "main, whose loader, bar and info paths are the same since 0.5.10): 'Multi-thread "
       "loading shards' on global rank 0 only; /server_info",
       "weight_utils.py multi_thread_safetensors_weights_iterator, default since 0.5.10 "
       "(sgl-project/sglang#20289); /server_info canonical (#21463); the image: "
       "docker/kimi_k3/kimi_k3_cu13.Dockerfile@0d64ba8b (FROM lmsysorg/sglang:v0.5.16, then "
       "`git clone --branch main` and `pip install -e python`)",
       {"sglang_version": "0.5.16"}, default=True),
    _p("vllm-0.33", "vllm", "vLLM 0.33 log lines and start-up",
       "vllm 0.33.0 wheel: vllm/logger.py _FORMAT, entrypoints/launchers/launcher.py, "
       "v1/worker/gpu_model_runner.py, model_executor/model_loader/weight_utils.py",
       {"vllm_version": "0.33.0"}, default=True),
    _p("ray-2.60", "ray", "Ray 2.60: `ray status` lags behind `ray start` (5 s reports)",
       "ray 2.60.0 python/ray/autoscaler/_private/commands.py debug_status (No cluster status. "
       "...), monitor.py update loop, constants.py AUTOSCALER_UPDATE_INTERVAL_S = 5",
       {"ray_version": "2.60.0", "ray_status_lag": 5.0}, default=True),
    _p("ray-gpus-claimed", "ray-gpus",
       "the serve's Ray workers claim the GPUs their placement groups reserve (TP over Ray)",
       "ray python/ray/autoscaler/_private/util.py get_usage_report; transcript "
       "tests/fixtures/real/ray/2.x/status-2nodes-16gpu-placement-groups.txt (vLLM 0.5.3)",
       {"ray_pg_gpus_claimed": True}, default=True),
    _p("ray-gpus-reserved", "ray-gpus",
       "TP 1, DP over Ray: the placement groups reserve every GPU, no Ray task claims one "
       "(`0.0/16.0 GPU (0.0 used of 16.0 reserved in placement groups)`)",
       "vllm 0.33.0 v1/engine/utils.py (engine-core actors on bundle index world_size, the "
       "CPU bundle); ray doc/source/ray-core/scheduling/placement-group.md transcript; issue 31",
       {"ray_pg_gpus_claimed": False}),
    _p("gpu-healthy", "gpu", "every GPU answers", "NVIDIA nvidia-smi(1)",
       {"lost_gpu": None}, default=True),
    _p("lost-gpu", "gpu", "one GPU fell off the bus: nvidia-smi exits non-zero naming it",
       "nvidia-smi 535.261.03 format string 'Unable to determine the device handle for GPU%s: "
       "%s'; transcripts NVIDIA/open-gpu-kernel-modules#387, meta-llama/llama-models#200; "
       "nvidia-smi(1) RETURN VALUE (255: other error)",
       {"lost_gpu": 3}),
    _p("no-hcas", "fabric", "no InfiniBand/RoCE HCA: NCCL runs over TCP sockets",
       "Linux: /sys/class/infiniband absent without an RDMA driver", {"ib_hcas": 0},
       default=True),
    _p("ib-hcas", "fabric",
       "eight ConnectX-7 NDR HCAs, one PIX to each GPU: /sys/class/infiniband/mlx5_{0..7}, "
       "/dev/infiniband, nvidia_peermem loaded; `nvidia-smi topo -m` as such a node prints it",
       "torvalds/linux drivers/infiniband/core/sysfs.c (state '4: ACTIVE', rate '400 Gb/sec "
       "(4X NDR)', link_layer 'InfiniBand'); drivers/infiniband/core/uverbs_main.c "
       "(IB_UVERBS_MAJOR 231, base minor 192), user_mad.c (umad major 231, minor 0); "
       "port values: ibstat in NVIDIA/nccl#1591 (MT4129, Active, 400, InfiniBand); "
       "/sys/module/<name> exists while a module is loaded (nvidia_peermem); the HCA count "
       "and topo -m: the 8x H100 node of sgl-project/sglang#30401 (tests/fixtures/real/"
       "nvidia-smi/570.133.20/topo-m-h100-8x-8hca.source)",
       {"ib_hcas": 8, "ib_rate": "400 Gb/sec (4X NDR)", "nvidia_peermem": True}),
    _p("ib-hcas-eth-frontend", "fabric",
       "twelve HCAs: eight ConnectX-7 InfiniBand (mlx5_0, 3, 4, 5, 6, 9, 10, 11) one PIX to each "
       "GPU, beside ConnectX-6 Ethernet ports (mlx5_7, mlx5_8 up; mlx5_1, mlx5_2 down): link "
       "layers mixed, names sharing prefixes (mlx5_1, mlx5_10); nvidia_peermem loaded",
       "kvcache-ai/Mooncake#2039 (8x H100: its ibstat and `nvidia-smi topo -m`, tests/fixtures/"
       "real/linux-sysfs/6.x/ib-ports-h100-12nic-eth-frontend.source, nvidia-smi/unknown/"
       "topo-m-h100-8x-12nic.source); sysfs formats as for ib-hcas",
       {"ib_hcas": 12, "nvidia_peermem": True, "ib_port_layout": [
           [name, "4: ACTIVE", "400 Gb/sec (4X NDR)", "InfiniBand"]
           for name in ("mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10",
                        "mlx5_11")] + [
           [name, "1: DOWN", "40 Gb/sec (4X QDR)", "Ethernet"] for name in ("mlx5_1", "mlx5_2")] + [
           [name, "4: ACTIVE", "100 Gb/sec (4X EDR)", "Ethernet"] for name in ("mlx5_7", "mlx5_8")]}),
    _p("sglang-decode-completes", "sglang-decode", "every decode step completes",
       "testbed", {"first_decode_hang": None}, default=True),
    _p("sglang-kimi-k3-cookbook", "sglang-decode",
       "the cookbook image lmsysorg/sglang:kimi-k3 (SGLang 0.5.16): on a multi-node group the "
       "first decode of 32 requests of 8192 prompt tokens never completes; the scheduler "
       "watchdog fires on every rank after --watchdog-timeout (300 s by default; node.json "
       "watchdog_time_scale scales it), SGLang's lines, exit 137; not with "
       "--disable-flashinfer-autotune and --watchdog-timeout 3600",
       "sgl-project/sglang#39568 (open; the reporter's working launch); sglang 0.5.16 wheel: "
       "srt/utils/watchdog.py WatchdogRaw, managers/scheduler_components/invariant_checker.py "
       "create_scheduler_watchdog, utils/cudacore_pyspy_dump_utils.py, managers/"
       "tokenizer_manager.py running_phase_sigquit_handler, entrypoints/engine.py "
       "launch_phase_sigquit_handler, utils/common.py kill_process_tree; py-spy failing in "
       "that image: sgl-project/sglang#33549 (standins/engine/decode_watchdog.py)",
       {"first_decode_hang": "lmsysorg/sglang:kimi-k3", "watchdog_time_scale": 1.0}),
    _p("engine-start-fast", "engine-start", "engine imports done at once (the testbed default)",
       "testbed", {"engine_import_seconds": 0.0}, default=True),
    _p("slow-engine-start", "engine-start",
       "the engine imports torch and its package for ~20 s before parsing its arguments",
       "issue 18 (10-30 s of `import torch, sglang` before argparse runs); start-up checks: "
       "server_args.py check_server_args, called by entrypoints/engine.py",
       {"engine_import_seconds": 20.0}),
)}

GROUPS = tuple(dict.fromkeys(p.group for p in PROFILES.values()))


class ProfileError(ValueError):
    """An unknown profile name, or two of one group named together."""


def resolve(names: list[str] | tuple[str, ...]) -> dict[str, str]:
    """Profile names -> {group: profile name} with every group's default filled in; a later
    name wins within its group."""
    chosen = {p.group: p.name for p in PROFILES.values() if p.default}
    for name in names:
        if name not in PROFILES:
            raise ProfileError(f"unknown profile {name!r}; `scripts/testbed profiles` lists them")
        chosen[PROFILES[name].group] = name
    return chosen


def settings(chosen: dict[str, str]) -> dict:
    out: dict = {}
    for name in chosen.values():
        out.update(PROFILES[name].settings)
    return out


def split_names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def listing() -> str:
    rows = []
    for group in GROUPS:
        for p in PROFILES.values():
            if p.group == group:
                mark = " (default)" if p.default else ""
                rows.append(f"{p.name:<22} {group:<13} {p.summary}{mark}\n{'':<36}source: {p.source}")
    return "\n".join(rows)

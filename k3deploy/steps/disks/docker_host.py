"""What docker on a node can do and where it keeps things, judged as dockerd does: GPUs for
`--gpus`, which image store it uses, and its data-root as it reports it. Facts and pure
decisions shared by preflight and nvme.

- `--gpus`: dockerd registers its NVIDIA device driver when it finds
  `nvidia-container-runtime-hook` on its PATH (moby daemon/devices_nvidia_linux.go@v28.5.1 and
  @docker-v29.1.2, init(); from docker-v29.2.0 also `nvidia-cdi-hook`, which injects CDI
  devices and so needs a CDI spec). dockerd runs under systemd's fixed PATH (systemd.exec(5)).
  An `nvidia` entry in `docker info` Runtimes (`nvidia-ctk runtime configure`) is neither
  needed nor enough.
- image store: `docker info` DriverStatus [["driver-type", "io.containerd.snapshotter.v1"]]
  is the containerd store (daemon/containerd/service.go@docker-v29.1.2, LayerStoreStatus);
  its images live under the system containerd's root, not data-root, when dockerd found that
  containerd's socket (daemon/command/daemon.go@docker-v29.1.2 systemContainerdRunning: an
  os.Lstat of /run/containerd/containerd.sock); otherwise dockerd runs its own containerd under
  data-root.
- data-root: dockerd keeps it absolute with symlinks evaluated (daemon/daemon.go@
  docker-v29.1.2, resolveSymlinkedDirectory) and DockerRootDir reports that.
"""

from __future__ import annotations

import json
from typing import Protocol

from k3deploy.cluster.inventory import Paths
from k3deploy.facts.dockerd import GpuHooks, parse_gpu_hooks
from k3deploy.node import facts as F
from k3deploy.steps.base import AnyFact
from k3deploy.steps import probes
from k3deploy.steps.disks import containerd_config


class ImageStore(Protocol):
    """What of a step's facts (preflight's, nvme's) says where the node's images go: the
    facts of `image_store_facts`."""

    @property
    def driver_status(self) -> str | None: ...
    @property
    def system_containerd(self) -> bool: ...
    @property
    def containerd_toml(self) -> str: ...

DOCKERD_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
RUNTIME_HOOK = "nvidia-container-runtime-hook"
CDI_HOOK = "nvidia-cdi-hook"
CDI_HOOK_SINCE = (29, 2)
CDI_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")     # the toolkit's default spec-dirs
CONTAINERD_SNAPSHOTTER = ["driver-type", "io.containerd.snapshotter.v1"]
CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
UNPACKED_PER_PULLED = 0.65 / 0.35   # compressed blobs ~35% of a containerd store's total


def _hook_script() -> str:
    hooks = " ".join(f"{d}/{h}" for d in DOCKERD_PATH for h in (RUNTIME_HOOK, CDI_HOOK))
    specs = " ".join(f"{d}/*" for d in CDI_SPEC_DIRS)
    return (f"for f in {hooks}; do [ -x \"$f\" ] && echo \"hook $f\"; done; "
            f"for f in {specs}; do [ -f \"$f\" ] && echo \"cdi $f\"; done; true")


def gpu_hooks() -> F.Fact[GpuHooks]:
    """The NVIDIA hooks on dockerd's PATH and the CDI specs (facts/dockerd.GpuHooks)."""
    return F.Fact("gpu_hooks", _hook_script(), parse_gpu_hooks)


def _version(text: str | None) -> tuple[int, int]:
    parts = [int(p) for p in (text or "").split("-")[0].split(".")[:2] if p.isdigit()]
    padded = parts + [0, 0]
    return padded[0], padded[1]


def gpu_access_problem(hooks: GpuHooks, server_version: str | None) -> str | None:
    """Why `docker run --gpus all` would fail on this node, or None when it works."""
    names = hooks.hook_names
    if RUNTIME_HOOK in names:
        return None
    if CDI_HOOK in names and _version(server_version) >= CDI_HOOK_SINCE and hooks.cdi_specs:
        return None
    return (f"docker cannot give containers GPUs: {RUNTIME_HOOK} is not on dockerd's PATH "
            f"({':'.join(DOCKERD_PATH)}), so `docker run --gpus all` fails with 'could not "
            "select device driver \"\" with capabilities: [[gpu]]'; install the NVIDIA "
            "Container Toolkit (apt-get install nvidia-container-toolkit), then "
            "`sudo systemctl restart docker` (dockerd looks the hook up when it starts)")


def uses_containerd_store(driver_status: str | None) -> bool:
    """From `docker info` DriverStatus (JSON text, as probes.docker_info gives it)."""
    try:
        pairs = json.loads(driver_status) if driver_status else []
    except json.JSONDecodeError:
        return False
    return isinstance(pairs, list) and CONTAINERD_SNAPSHOTTER in pairs


def image_disk_bytes(pulled: float, driver_status: str | None) -> float:
    """Disk the engine image takes once pulled, from what a pull moves (`pulled`, the
    compressed size a registry lists) and the node's image store (`docker info` DriverStatus).
    The legacy store (overlay2) unpacks the layers and drops the compressed blobs: one unpacked
    copy. The containerd store keeps both, the compressed blobs in containerd's content store
    and the unpacked snapshots (moby/moby#50103: "Docker now stores both distributable
    (compressed) and the uncompressed image content ... higher disk usage compared to the
    legacy graphdrivers which only kept the unpacked content"; docs.docker.com
    engine/storage/containerd, "Disk space usage", docker/docs#23766, #24496). The compressed
    blobs are about 35% of that total (deckhouse/deckhouse#4843, discard_unpacked_layers):
    UNPACKED_PER_PULLED unpacked bytes per pulled byte."""
    unpacked = pulled * UNPACKED_PER_PULLED
    return unpacked + pulled if uses_containerd_store(driver_status) else unpacked


def system_containerd() -> F.Fact[bool]:
    return F.native("system_containerd", "exists", [CONTAINERD_SOCKET], F.exit_ok, sudo=True)


def images_under_containerd_root(facts: ImageStore) -> bool:
    """Do the node's images live under the system containerd's root (so moving data-root does
    not move them)?"""
    return uses_containerd_store(facts.driver_status) and facts.system_containerd


def image_store_facts() -> list[AnyFact]:
    """What says where the node's images go: the store, a system containerd, its config."""
    return [probes.docker_info("driver_status", "DriverStatus"), system_containerd(),
            containerd_config.fact()]


def image_store_problem(facts: ImageStore, paths: Paths) -> str | None:
    """Why the nvme step could not put the image store on the NVMe (`paths`: the inventory's),
    or None."""
    if not images_under_containerd_root(facts):
        return None
    try:
        containerd_config.root_of(facts.containerd_toml)
    except containerd_config.ConfigError as err:
        return (f"docker keeps images under containerd's root here (the containerd image store), "
                f"but {err}: k3deploy cannot move that root to {paths.nvme}; fix the file, or "
                f"set root = \"{paths.containerd}\" in it and restart containerd")
    return None


def resolved(name: str, path: str) -> F.Fact[str | None]:
    """`path` as the node resolves it (symlinks evaluated, missing tail kept: realpath -m):
    what dockerd would report for it once it exists."""
    return F.native(name, "realpath", [path], F.text, sudo=True)

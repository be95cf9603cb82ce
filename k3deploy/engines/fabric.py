"""What the engine container gets of the node's fabric, decided once from `engine.fabric`
and the node's HCAs.

`--gpus` injects GPU devices only: without `/dev/infiniband` NCCL finds no IB device and runs
over TCP sockets (vLLM docs/serving/parallelism_scaling.md: "to use InfiniBand, append
`--privileged -e NCCL_IB_HCA=mlx5`"; the toolkit adds /dev/infiniband only with
NVIDIA_MOFED=enabled in CDI mode, nvidia-container-toolkit internal/discover/mofed.go).
Registering memory for RDMA needs CAP_IPC_LOCK besides `--ulimit memlock=-1`."""

from __future__ import annotations

from k3deploy.engines.spec import NCCL_LOG_MOUNT
from k3deploy.facts.fabric import DEV_IB, NodeFabric

IB_RUN_FLAGS = ["--device", DEV_IB, "--cap-add", "IPC_LOCK"]
# NCCL's INFO lines for its init and network choice (facts/nccl.py reads them)
NCCL_DEBUG_ENV = [("NCCL_DEBUG", "INFO"), ("NCCL_DEBUG_SUBSYS", "INIT,NET")]
# NCCL writes those lines with vfprintf to C stdio's stdout and never flushes it (NVIDIA/nccl
# 2.30.7 src/debug.cc:37,376); in a container stdout is a pipe, so glibc holds them in a 4 KiB
# block until it fills or the process exits (NVIDIA/nccl#1841, sgl-project/sglang#3810).
# NCCL_DEBUG_FILE is opened per process, "%h" -> the host name up to its first dot, "%p" -> the
# pid, and made line-buffered (debug.cc:194-240: setlinebuf): one file per rank process on the
# node's disk, written as NCCL logs. PYTHONUNBUFFERED=1 makes CPython set C stdio's stdout
# unbuffered as well (cpython Python/initconfig.c config_init_stdio: setvbuf(stdout, NULL,
# _IONBF, BUFSIZ)), so docker logs gets them too where the file cannot be opened.
NCCL_DEBUG_FILE = f"{NCCL_LOG_MOUNT}/%h.%p.log"
UNBUFFERED_ENV = ("PYTHONUNBUFFERED", "1")


def sockets_only(mode: str) -> bool:
    """`engine.fabric: socket`: NCCL is told to leave every HCA alone."""
    return mode == "socket"


def choice(mode: str, fabric: NodeFabric | None) -> tuple[tuple[str, ...], bool]:
    """(HCAs to pass into the container, NCCL_IB_DISABLE). `ib` on a node without a usable
    HCA passes nothing: preflight names that node."""
    if sockets_only(mode):
        return (), True
    if fabric is not None and fabric.usable:
        return fabric.nccl_hcas(), False
    return (), False


def ib_hca_value(hcas: tuple[str, ...]) -> str:
    """NCCL_IB_HCA as the guides write it: "=" makes every entry exact. Without it each entry
    is a name prefix (NVIDIA/nccl src/misc/utils.cc:218-241 matchIf/matchIfList), so "mlx5_1"
    would also select mlx5_10..mlx5_19, an Ethernet front end among them on hosts that number
    twelve or more ports (kvcache-ai/Mooncake#2039: IB mlx5_10, mlx5_11 beside Ethernet
    mlx5_1, mlx5_2, mlx5_7, mlx5_8).
    `hcas`: the devices of one link layer (facts/fabric.NodeFabric.nccl_hcas)."""
    return "=" + ",".join(hcas)


def run_flags(hcas: tuple[str, ...]) -> list[str]:
    return list(IB_RUN_FLAGS) if hcas else []


def env(hcas: tuple[str, ...], disable: bool, debug_files: bool = False) -> list[tuple[str, str]]:
    """debug_files: the node's NCCL log dir is mounted at NCCL_LOG_MOUNT."""
    out = list(NCCL_DEBUG_ENV) + ([("NCCL_DEBUG_FILE", NCCL_DEBUG_FILE)] if debug_files else [])
    out.append(UNBUFFERED_ENV)
    if hcas:
        out.append(("NCCL_IB_HCA", ib_hca_value(hcas)))
    if disable:
        out.append(("NCCL_IB_DISABLE", "1"))
    return out

"""What the engine container gets of the node's fabric, decided once from `engine.fabric`
and the node's HCAs.

`--gpus` injects GPU devices only: without `/dev/infiniband` NCCL finds no IB device and runs
over TCP sockets (vLLM docs/serving/parallelism_scaling.md: "to use InfiniBand, append
`--privileged -e NCCL_IB_HCA=mlx5`"; the toolkit adds /dev/infiniband only with
NVIDIA_MOFED=enabled in CDI mode, nvidia-container-toolkit internal/discover/mofed.go).
Registering memory for RDMA needs CAP_IPC_LOCK besides `--ulimit memlock=-1`."""

from __future__ import annotations

from k3deploy.facts.fabric import DEV_IB, NodeFabric

IB_RUN_FLAGS = ["--device", DEV_IB, "--cap-add", "IPC_LOCK"]
# NCCL's INFO lines for its init and network choice (facts/nccl.py reads them)
NCCL_DEBUG_ENV = [("NCCL_DEBUG", "INFO"), ("NCCL_DEBUG_SUBSYS", "INIT,NET")]


def sockets_only(mode: str) -> bool:
    """`engine.fabric: socket`: NCCL is told to leave every HCA alone."""
    return mode == "socket"


def choice(mode: str, fabric: NodeFabric | None) -> tuple[tuple[str, ...], bool]:
    """(HCAs to pass into the container, NCCL_IB_DISABLE). `ib` on a node without a usable
    HCA passes nothing: preflight names that node."""
    if sockets_only(mode):
        return (), True
    if fabric is not None and fabric.usable:
        return fabric.hcas, False
    return (), False


def run_flags(hcas: tuple[str, ...]) -> list[str]:
    return list(IB_RUN_FLAGS) if hcas else []


def env(hcas: tuple[str, ...], disable: bool) -> list[tuple[str, str]]:
    out = list(NCCL_DEBUG_ENV)
    if hcas:
        out.append(("NCCL_IB_HCA", ",".join(hcas)))
    if disable:
        out.append(("NCCL_IB_DISABLE", "1"))
    return out

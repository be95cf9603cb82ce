"""GPUDirect RDMA before NCCL has said: nvidia_peermem, else DMA-BUF (the open GPU kernel
modules on Linux >= 5.12), from real /proc/driver/nvidia/version texts; "unknown" rather than
"off" when nothing says. Preflight's warning says which."""

from __future__ import annotations

from types import SimpleNamespace as NS

from k3deploy.facts import fabric, gpudirect
from k3deploy.steps.fabric import fabric_check
from tests.realfix import real
from tests.unit.preflight_facts import preflight_facts

OPEN = real("nvidia-driver/565.57.01/proc-version-open.txt")
PROPRIETARY = real("nvidia-driver/384.98/proc-version-proprietary.txt")
KERNEL = "6.2.0-1015-nvidia-64k\n"   # `uname -r` of the GH200 nodes in NVIDIA/nccl#1291


def test_the_driver_flavour_and_the_kernel_release():
    assert gpudirect.parse_dmabuf(OPEN + KERNEL, 0) == gpudirect.DmaBuf(True, "6.2.0-1015-nvidia-64k")
    assert gpudirect.parse_dmabuf(PROPRIETARY + KERNEL, 0).open_modules is False
    assert gpudirect.parse_dmabuf(KERNEL, 0) == gpudirect.DmaBuf(None, "6.2.0-1015-nvidia-64k")
    assert gpudirect.parse_dmabuf(OPEN + "5.4.0-42-generic\n", 0).supported is False
    assert gpudirect.parse_dmabuf("", 1).supported is None


def test_peermem_else_dma_buf_else_off_or_unknown():
    assert gpudirect.support(True, None)[0] is True
    on, why = gpudirect.support(False, gpudirect.parse_dmabuf(OPEN + KERNEL, 0))
    assert on is True and why.startswith("DMA-BUF")
    off, why = gpudirect.support(False, gpudirect.parse_dmabuf(PROPRIETARY + KERNEL, 0))
    assert off is False and "proprietary" in why
    assert gpudirect.support(False, gpudirect.parse_dmabuf(KERNEL, 0))[0] is None
    assert gpudirect.support(False, None)[0] is None


def test_preflight_warns_off_only_where_the_node_rules_both_out():
    ports = (fabric.IbPort("mlx5_0", 1, "ACTIVE", 400.0, "InfiniBand"),)

    def node(peermem: bool, version: str | None):
        dmabuf = gpudirect.parse_dmabuf(version + KERNEL, 0) if version is not None else None
        return preflight_facts(ib_ports=ports, ib_devices=("uverbs0",), gpudirect_rdma=peermem,
                               gpu_dmabuf=dmabuf)
    nodes = {"node0": node(True, None), "node1": node(False, OPEN),
             "node2": node(False, PROPRIETARY), "node3": node(False, "")}
    lines = fabric_check.warnings(nodes, NS(inv=NS(engine=NS(fabric="auto"))))
    assert lines[0].startswith("warning: GPUDirect RDMA is off on node2 (nvidia_peermem not "
                               "loaded, and no DMA-BUF with the proprietary kernel modules)")
    assert lines[1].startswith("warning: GPUDirect RDMA is unknown on node3 (")
    assert not any("node0" in line or "node1" in line for line in lines)

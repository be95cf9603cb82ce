"""Which transport NCCL chose, from its own INFO lines in a rank's log or debug files.

NCCL 2.30.7 (NVIDIA/nccl@5067397c): every INFO line is "host:pid:tid [dev] NCCL INFO ..."
(src/debug.cc); "Using network %s" names the net plugin (src/init.cc:486: IB, Socket, or a
plugin's name such as IBext_v8 or Libfabric); "NET/IB : Using [0]mlx5_0:1/IB [1]... [RO]; OOB
eth0:ADDR<0>" (src/transport/net_ib/init.cc:513; a rail adds ":N" after the port) and
"NET/Socket : Using [0]eth0:ADDR<0>" (src/transport/net_socket.cc:77) name the devices; the
IBext plugin (nccl-rdma-sharp-plugins) prints merged NICs as "[0]={[0] mlx5_2:1/RoCE, [1]
mlx5_3:1/RoCE}" (NVIDIA/nccl-tests#373) and SHARP ports as "mlx5_0:1/IB/SHARP"
(NVIDIA/nccl#1357). The lines appear only with NCCL_DEBUG=INFO (NCCL_DEBUG_SUBSYS=INIT,NET
keeps it to these).

GPUDirect RDMA, by NCCL's own evidence: a channel "via NET/<net>/<dev>[(proxy)]/GDRDMA"
(src/transport/net.cc:324-331, the net's own name: NET/IBext_v8/1/GDRDMA with the plugin)
says it carries the data; NET channels without "/GDRDMA" say the data is staged through host
memory; else "DMA-BUF is available on GPU device N" (src/init.cc:416: the GPU exports DMA-BUF
and the net registers it, so NCCL needs no nvidia_peermem). None of them: unknown."""

from __future__ import annotations

import re
from dataclasses import dataclass

_INFO = r"NCCL INFO "
_NETWORK = re.compile(_INFO + r"Using network ([^\n]*\S)")
_IB = re.compile(_INFO + r"NET/IB : Using([^;\n]*)")
_SOCKET = re.compile(_INFO + r"NET/Socket : Using([^;\n]*)")
# mlx5_0:1/IB, mlx5_0:1:0/IB (rail), mlx5_0:1/IB/SHARP, rocep130s0:2/RoCE; never "[RO]"
_IB_DEVICE = re.compile(r"([^\s\[\]{},=;]+:\d+(?::\d*)*/[A-Za-z]+(?:/[A-Za-z]+)*)")
_SOCKET_DEVICE = re.compile(r"\[\d+\]([^\s:]+):")
# the net's name may hold spaces: "via NET/NCCL RDMA Plugin v6/0(0)/GDRDMA/Shared"
_GDR = re.compile(r"via NET/[^/\n]+/\d+(?:\(\d+\))?/GDRDMA")
_NET_CHANNEL = re.compile(r"via NET/[^/\n]+/\d+")
_DMABUF = re.compile(_INFO + r"DMA-BUF is available on GPU device")
# The lines a log reader needs (ERE, no backslash), the same patterns as above: the init lines
# (a few per rank) and one line of each kind of evidence (channel lines come one per channel
# and peer).
INIT_PATTERN = "NCCL INFO (Using network|NET/(IB|Socket) : Using)"
GDR_PATTERN = "via NET/[^/]+/[0-9]+[(0-9)]*/GDRDMA"
CHANNEL_PATTERN = "via NET/[^/]+/[0-9]+"
DMABUF_PATTERN = "NCCL INFO DMA-BUF is available on GPU device"


@dataclass(frozen=True)
class NcclTransport:
    transport: str               # "IB" | "Socket" | the plugin's own name
    devices: tuple[str, ...]     # mlx5_0:1/IB ... or eth0
    gpudirect: bool | None       # NCCL's evidence (module docstring); None: it said nothing
    gpudirect_evidence: str | None = None


def parse_transport(log: str) -> NcclTransport | None:
    """The transport NCCL printed last (a relaunch appends to the log); None when the log has
    no "Using network" line (NCCL not initialised yet, or NCCL_DEBUG below INFO)."""
    networks = _NETWORK.findall(log)
    if not networks:
        return None
    name = networks[-1]
    transport = "IB" if name.startswith("IB") else name
    if transport == "Socket":
        found = _SOCKET.findall(log)
        devices = tuple(_SOCKET_DEVICE.findall(found[-1])) if found else ()
    else:
        found = _IB.findall(log)
        devices = tuple(_IB_DEVICE.findall(found[-1])) if found else ()
    return NcclTransport(transport, devices, *gpudirect(log))


def gpudirect(log: str) -> tuple[bool | None, str | None]:
    """(GPUDirect RDMA in use, the line kind that says so), NCCL's evidence first to last."""
    if _GDR.search(log):
        return True, "a channel via NET/.../GDRDMA"
    if _NET_CHANNEL.search(log):
        return False, "channels via NET without GDRDMA (staged through host memory)"
    if _DMABUF.search(log):
        return True, "DMA-BUF is available on the GPU"
    return None, None

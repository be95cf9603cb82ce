"""Which transport NCCL chose, from its own INFO lines in a rank's log.

NCCL 2.30.7 (NVIDIA/nccl@5067397c): every INFO line is "host:pid:tid [dev] NCCL INFO ..."
(src/debug.cc); "Using network %s" names the net plugin (src/init.cc:486: IB, Socket, or a
plugin's name such as IBext); "NET/IB : Using [0]mlx5_0:1/IB [1]... [RO]; OOB eth0:ADDR<0>"
(src/transport/net_ib/init.cc:513) and "NET/Socket : Using [0]eth0:ADDR<0>"
(src/transport/net_socket.cc:77) name the devices. The lines appear only with NCCL_DEBUG=INFO
(NCCL_DEBUG_SUBSYS=INIT,NET keeps it to these). A channel "via NET/IB/0/GDRDMA"
(src/transport/net.cc) says GPUDirect RDMA carries it."""

from __future__ import annotations

import re
from dataclasses import dataclass

_INFO = r"NCCL INFO "
_NETWORK = re.compile(_INFO + r"Using network (\S+)")
_IB = re.compile(_INFO + r"NET/IB : Using((?: \[\d+\]\S+)+)")
_SOCKET = re.compile(_INFO + r"NET/Socket : Using((?: \[\d+\]\S+)+)")
_DEVICE = re.compile(r"\[\d+\](\S+)")
_GDR = re.compile(r"via NET/IB/\d+/GDRDMA")
# The lines a log reader needs (ERE, no backslash), the same patterns as above: the init lines
# (a few per rank) and the channel lines (one per channel and peer: one GDRDMA line is enough).
INIT_PATTERN = "NCCL INFO (Using network|NET/(IB|Socket) : Using)"
GDR_PATTERN = "via NET/IB/[0-9]+/GDRDMA"


@dataclass(frozen=True)
class NcclTransport:
    transport: str               # "IB" | "Socket" | the plugin's own name
    devices: tuple[str, ...]     # mlx5_0:1/IB ... or eth0
    gpudirect: bool              # a channel went via NET/IB/N/GDRDMA


def parse_transport(log: str) -> NcclTransport | None:
    """The transport NCCL printed last (a relaunch appends to the log); None when the log has
    no "Using network" line (NCCL not initialised yet, or NCCL_DEBUG below INFO)."""
    networks = _NETWORK.findall(log)
    if not networks:
        return None
    name = networks[-1]
    transport = "IB" if name.startswith("IB") else name
    found = (_IB if transport == "IB" else _SOCKET).findall(log)
    devices = tuple(_device(d, transport) for d in _DEVICE.findall(found[-1])) if found else ()
    return NcclTransport(transport, devices, bool(_GDR.search(log)))


def _device(text: str, transport: str) -> str:
    # Socket: "eth0:10.0.0.1<0>" -> eth0; IB keeps "mlx5_0:1/IB" (port and link layer)
    return text.split(":", 1)[0] if transport == "Socket" else text

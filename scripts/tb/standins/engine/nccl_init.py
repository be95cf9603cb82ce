"""NCCL's INFO lines at communicator init, for the transport the container was given.

NCCL 2.30.7 (NVIDIA/nccl@5067397c): prefix "host:pid:tid [dev] NCCL INFO " (src/debug.cc);
"NET/IB : Using [0]mlx5_0:1/IB [1]... [RO]; OOB eth0:ADDR<0>" (src/transport/net_ib/init.cc:513)
or "NET/Socket : Using [0]eth0:ADDR<0>" (src/transport/net_socket.cc:77), then "Using network
IB|Socket" (src/init.cc:486). Printed only with NCCL_DEBUG=INFO, as the real library does, and
written where the library writes them (ncclout.py: NCCL_DEBUG_FILE, else block-buffered stdout).
IB needs the verbs devices inside the container (`--device /dev/infiniband`) and
NCCL_IB_DISABLE unset or 0 (src/transport/net_ib/init.cc NCCL_PARAM IbDisable). NCCL_IB_HCA
(init.cc:317-324, src/misc/utils.cc:189-241 parseStringList/matchIfList): a leading '^'
excludes, then a leading '=' makes every entry exact; otherwise each entry is a name prefix
("mlx5_1" selects mlx5_1 and mlx5_10..mlx5_19), ":N" after a name picks its port.
A multi-node group's channels between nodes go "via NET/IB/<dev>/GDRDMA" when GPUDirect RDMA
is possible (src/transport/net.cc:324-331; nvidia_peermem loaded: src/transport/net_ib/gdr.cc
reads /sys/module/nvidia_peermem), "via NET/<net>/<dev>" otherwise. Devices of different
link layers in one group fail the connection: "NET/IB : Attempted to connect incompatible
devices" (src/transport/net_ib/connect.cc:985-990)."""
import os
import threading

import ncclout
from common import EngineExit

SYS_IB = "/sys/class/infiniband"
PEERMEM = "/sys/module/nvidia_peermem"


def selects(spec, name, port=1):
    """Whether NCCL_IB_HCA's value `spec` selects device `name` port `port` (no value: all)."""
    spec = spec or ""
    exclude = spec.startswith("^")
    spec = spec[1:] if exclude else spec
    exact = spec.startswith("=")
    spec = spec[1:] if exact else spec
    entries = [e.split(":") for e in spec.split(",") if e.split(":")[0]]
    if not entries:
        return True
    hit = any((name == e[0] if exact else name.startswith(e[0]))
              and (len(e) < 2 or not e[1] or int(e[1]) == port) for e in entries)
    return hit != exclude


def _read(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return ""


def active_ports(env):
    """[(device, link layer)] of the ACTIVE ports NCCL_IB_HCA selects, in device order."""
    try:
        names = sorted(os.listdir(SYS_IB), key=lambda n: (len(n), n))
    except OSError:
        return []
    out = []
    for name in names:
        ports = os.path.join(SYS_IB, name, "ports")
        for port in sorted(os.listdir(ports)) if os.path.isdir(ports) else []:
            if _read(os.path.join(ports, port, "state")).endswith("ACTIVE") and \
                    selects(env.get("NCCL_IB_HCA"), name, int(port)):
                layer = _read(os.path.join(ports, port, "link_layer"))
                out.append((name, "RoCE" if layer == "Ethernet" else "IB"))
    return out


def transport(container, env):
    """("IB", [(hca, link layer), ...]) or ("Socket", [])."""
    passed = any(os.path.normpath(d.get("host", "")) in ("/dev/infiniband",)
                 or d.get("host", "").startswith("/dev/infiniband/")
                 for d in container.config.get("devices") or [])
    verbs = os.path.isdir("/dev/infiniband") and any(
        n.startswith("uverbs") for n in os.listdir("/dev/infiniband"))
    ports = active_ports(env)
    if passed and verbs and ports and env.get("NCCL_IB_DISABLE", "0") != "1":
        return "IB", ports
    return "Socket", []


def _prefix():
    return f"{os.uname().nodename}:{os.getpid()}:{threading.get_native_id()} [0] NCCL "


def lines(container, env, nic, address, nnodes=1):
    if (env.get("NCCL_DEBUG") or "").upper() not in ("INFO", "TRACE"):
        return []
    prefix = _prefix() + "INFO "
    kind, ports = transport(container, env)
    if kind == "IB":
        used = " ".join(f"[{i}]{h}:1/{layer}" for i, (h, layer) in enumerate(ports))
        net = f"NET/IB : Using {used} [RO]; OOB {nic}:{address}<0>"
    else:
        net = f"NET/Socket : Using [0]{nic}:{address}<0>"
    out = [prefix + net, prefix + f"Using network {kind}"]
    if nnodes > 1:
        gdr = "/GDRDMA" if kind == "IB" and os.path.isdir(PEERMEM) else ""
        out.append(prefix + f"Channel 00/0 : 8[0] -> 0[0] [receive] via NET/{kind}/0{gdr}")
    return out


def incompatible(env, ports):
    """NCCL's WARN when the selected devices are not all of one link layer, else None."""
    layers = {layer for _, layer in ports}
    if len(layers) < 2:
        return None
    first = ports[0]
    other = next(p for p in ports if p[1] != first[1])
    i, j = ports.index(other), 0
    return (_prefix() + f"WARN NET/IB : Attempted to connect incompatible devices: "
            f"[{i}]{other[0]}:1/{other[1]} and [{j}]{first[0]}:1/{first[1]}. Try selecting "
            "NICs of only one link type using NCCL_IB_HCA")


def init(container, env, nic, address, nnodes=1):
    """This rank's NCCL init: its lines where NCCL writes them; a group over HCAs of mixed
    link layers fails as NCCL's connect does."""
    ncclout.emit(container, env, lines(container, env, nic, address, nnodes))
    kind, ports = transport(container, env)
    warn = incompatible(env, ports) if kind == "IB" and nnodes > 1 else None
    if warn:
        ncclout.emit(container, env, [warn])
        raise EngineExit(warn + "\nncclInternalError: Internal check failed.")

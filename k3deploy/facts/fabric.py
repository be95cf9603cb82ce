"""The node's fabric as the kernel shows it: InfiniBand/RoCE ports in sysfs, the verbs
character devices, and whether GPUDirect RDMA's module is loaded.

File formats: Linux drivers/infiniband/core/sysfs.c (state_show "%d: %s", rate_show
"%d%s Gb/sec (%dX%s)", link_layer_show "InfiniBand" | "Ethernet"); the device nodes are
what rdma-core's udev rules create under /dev/infiniband (uverbsN, umadN, issmN, rdma_cm);
nvidia_peermem is the module GPUDirect RDMA needs (NVIDIA's GPUDirect RDMA guide: "the
nvidia-peermem kernel module"), present as /sys/module/nvidia_peermem while loaded."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from k3deploy.facts import Probe

SYS_IB = "/sys/class/infiniband"
DEV_IB = "/dev/infiniband"
PEERMEM = "/sys/module/nvidia_peermem"
_PORT_FILES = ("state", "rate", "link_layer")
_LINE = re.compile(rf"^{SYS_IB}/([^/]+)/ports/(\d+)/(\w+):(.*)$")
_RATE = re.compile(r"^(\d+)(\.5)? Gb/sec \((\d+)X ?([A-Z0-9]*)\)$")


@dataclass(frozen=True)
class IbPort:
    device: str            # mlx5_0
    port: int
    state: str             # ACTIVE, DOWN, INIT, ARMED, ... (the name after "N: ")
    rate_gbps: float | None
    link_layer: str        # InfiniBand | Ethernet (RoCE) | Unknown

    @property
    def active(self) -> bool:
        return self.state == "ACTIVE"

    @property
    def label(self) -> str:
        return f"{self.device}:{self.port}"


def ports_probe() -> Probe[tuple[IbPort, ...] | None]:
    # grep -H prints "PATH:TEXT" for every line of every file; with no HCA the globs stay
    # unexpanded and grep's complaint is dropped: no output is "no ports", not a failure.
    globs = " ".join(f"{SYS_IB}/*/ports/*/{name}" for name in _PORT_FILES)
    return Probe("ib_ports", f"grep -H . {globs} 2>/dev/null; true", parse_ports)


def parse_ports(out: str, code: int) -> tuple[IbPort, ...] | None:
    """`grep -H .` over each port's state, rate and link_layer -> one record per port."""
    if code != 0:
        return None
    seen: dict[tuple[str, int], dict[str, str]] = {}
    for line in out.splitlines():
        m = _LINE.match(line.strip())
        if m:
            seen.setdefault((m.group(1), int(m.group(2))), {})[m.group(3)] = m.group(4).strip()
    return tuple(IbPort(dev, port, _state(f.get("state", "")), parse_rate(f.get("rate", "")),
                        f.get("link_layer", "Unknown"))
                 for (dev, port), f in sorted(seen.items()))


def _state(text: str) -> str:
    return text.partition(": ")[2] or text or "UNKNOWN"


def parse_rate(text: str) -> float | None:
    """"400 Gb/sec (4X NDR)" -> 400.0; "2.5 Gb/sec (1X)" -> 2.5."""
    m = _RATE.match(text.strip())
    if not m:
        return None
    return int(m.group(1)) + (0.5 if m.group(2) else 0.0)


def devices_probe() -> Probe[tuple[str, ...] | None]:
    return Probe("ib_devices", f"ls -1 {DEV_IB} 2>/dev/null; true", parse_devices)


def parse_devices(out: str, code: int) -> tuple[str, ...] | None:
    """`ls -1 /dev/infiniband` -> the device node names (uverbs0, rdma_cm, ...)."""
    if code != 0:
        return None
    return tuple(sorted(name.strip() for name in out.splitlines() if name.strip()))


def peermem_probe() -> Probe[bool]:
    return Probe("gpudirect_rdma", f"test -d {PEERMEM}", lambda _out, code: code == 0)


@dataclass(frozen=True)
class NodeFabric:
    """One node's fabric: its HCA ports and the devices a container needs to use them."""
    ports: tuple[IbPort, ...]
    devices: tuple[str, ...]
    gpudirect_rdma: bool

    @property
    def hcas(self) -> tuple[str, ...]:
        """The HCAs with an active port, in order: what NCCL_IB_HCA names."""
        return tuple(dict.fromkeys(p.device for p in self.ports if p.active))

    @property
    def usable(self) -> bool:
        """An HCA with an active port and the verbs device a process opens to use it."""
        return bool(self.hcas) and any(d.startswith("uverbs") for d in self.devices)

    @property
    def active_by_layer(self) -> dict[str, tuple[str, ...]]:
        """Link layer -> its active ports (mlx5_0:1), for naming a node whose ports mix them."""
        out: dict[str, tuple[str, ...]] = {}
        for p in self.ports:
            if p.active:
                out[p.link_layer] = (*out.get(p.link_layer, ()), p.label)
        return out

    def nccl_layer(self, nearest: tuple[str, ...] = ()) -> str | None:
        """The one link layer NCCL is given: that of the active HCAs nearest the GPUs
        (`nvidia-smi topo -m`, facts/topology.py) when known, else the one most active ports
        have. NCCL connects only devices of one link layer ("NET/IB : Attempted to connect
        incompatible devices", NVIDIA/nccl src/transport/net_ib/connect.cc:985-990)."""
        active = [p for p in self.ports if p.active]
        if not active:
            return None
        count = Counter(p.link_layer for p in active)
        near = Counter(p.link_layer for p in active if p.device in nearest) or count
        # a tie goes to InfiniBand: a GPU node's compute fabric, where Ethernet is the front end
        return max(near, key=lambda layer: (near[layer], count[layer], layer == "InfiniBand"))

    def nccl_hcas(self, nearest: tuple[str, ...] = ()) -> tuple[str, ...]:
        """NCCL_IB_HCA's entries: the devices with an active port of `nccl_layer`, a device
        whose active ports differ in link layer (a VPI card) by its port ("mlx5_0:1")."""
        layer = self.nccl_layer(nearest)
        mixed = {p.device for p in self.ports if p.active and p.link_layer != layer}
        chosen = [p for p in self.ports if p.active and p.link_layer == layer]
        return tuple(dict.fromkeys(p.label if p.device in mixed else p.device for p in chosen))


def probes() -> list[Probe[object]]:
    return [ports_probe(), devices_probe(), peermem_probe()]


def node_fabric(facts: Mapping[str, object]) -> NodeFabric | None:
    """The fabric from a batch's values by probe name (the names of `probes()`: each value
    is what its own parser returned, so the batch as a whole holds no one type); None when
    sysfs was not read."""
    ports, devices = facts.get("ib_ports"), facts.get("ib_devices")
    if not isinstance(ports, tuple):   # None: parse_ports could not read sysfs
        return None
    return NodeFabric(tuple(p for p in ports if isinstance(p, IbPort)),
                      tuple(d for d in devices if isinstance(d, str))
                      if isinstance(devices, tuple) else (),
                      bool(facts.get("gpudirect_rdma")))

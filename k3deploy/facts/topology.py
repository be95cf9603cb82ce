"""Which HCA sits nearest each GPU, from `nvidia-smi topo -m`.

The matrix as the driver prints it (tests/fixtures/real/nvidia-smi/*/topo-m-*.txt): a header of
column names (GPU0.., then the NICs, then "CPU Affinity", "NUMA Affinity", ...), one row per GPU
and per NIC, each cell X (self), NV# (NVLink) or a PCIe path, then "Legend:". Drivers since
about 2022 name the NICs NIC0.. and map them in a closing "NIC Legend:" block ("  NIC0: mlx5_0",
driver 525.105.17 and 570.133.20); older ones put the HCA's name in the header (mlx5_0, the
DGX-1 transcript). Cells are tab-separated as the tool writes them, spaces once pasted.
The PCIe path names, nearest first, as the legend explains them: PIX (at most one PCIe bridge),
PXB (several bridges, no host bridge), PHB (through a PCIe host bridge, the CPU), NODE (between
host bridges of one NUMA node), SYS (across the SMP interconnect between NUMA nodes, QPI/UPI)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from k3deploy.facts import Probe

PATHS = ("PIX", "PXB", "PHB", "NODE", "SYS")   # nearest first
_GPU = re.compile(r"^GPU(\d+)$")
_LEGEND = re.compile(r"^\s*(NIC\d+):\s*(\S+)\s*$")
# A header some drivers underline with ANSI escapes when writing to a terminal (the comment
# in NVIDIA/k8s-launch-kit#50's parser of this output); a pipe over SSH has none, but a
# pasted transcript may.
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class GpuNic:
    gpu: int
    nics: tuple[str, ...]   # the HCAs at the nearest path (a dual-port card shows two)
    path: str               # PIX | PXB | PHB | NODE | SYS


@dataclass(frozen=True)
class Topology:
    gpus: tuple[int, ...]
    nics: tuple[str, ...]           # HCA names: the NIC legend's, else the header's
    nearest: tuple[GpuNic, ...]     # one per GPU; () when the matrix has no NIC

    @property
    def signature(self) -> str:
        """What two nodes must share to be laid out alike (GPU -> HCA and path)."""
        return "; ".join(f"GPU{g.gpu}>{'/'.join(g.nics)} {g.path}" for g in self.nearest)


def probe() -> Probe[Topology | None]:
    return Probe("gpu_nic_topology", "nvidia-smi topo -m", parse_topology)


def parse_topology(out: str, code: int) -> Topology | None:
    """`nvidia-smi topo -m` -> Topology; None when it failed or printed no matrix."""
    if code != 0:
        return None
    lines = _ANSI.sub("", out).splitlines()
    header = next((i for i, line in enumerate(lines) if line.split()[:1] == ["GPU0"]), None)
    if header is None:
        return None
    columns = _columns(lines[header])
    rows = _rows(lines[header + 1:], columns)
    legend = {m[1]: m[2] for line in lines if (m := _LEGEND.match(line))}
    nic_cols = [c for c in columns if not _GPU.match(c)]
    gpus = tuple(int(m.group(1)) for c in columns if (m := _GPU.match(c)) and c in rows)
    nearest = tuple(g for g in (_nearest(i, rows[f"GPU{i}"], columns, legend) for i in gpus) if g)
    return Topology(gpus, tuple(legend.get(c, c) for c in nic_cols), nearest)


def _columns(header: str) -> list[str]:
    # The device columns end where "CPU Affinity" begins (older drivers print only that one).
    words = header.split()
    return words[:words.index("CPU")] if "CPU" in words else words


def _rows(lines: list[str], columns: list[str]) -> dict[str, list[str]]:
    """Each device row's cells, one per column (the affinity columns after them dropped)."""
    rows = {}
    for line in lines:
        words = line.split()
        if words and words[0] in columns and len(words) > len(columns):
            rows[words[0]] = words[1:len(columns) + 1]
    return rows


def _nearest(gpu: int, cells: list[str], columns: list[str], legend: dict[str, str]) -> GpuNic | None:
    paths = {legend.get(c, c): cell for c, cell in zip(columns, cells)
             if not _GPU.match(c) and cell in PATHS}
    if not paths:
        return None
    best = min(paths.values(), key=PATHS.index)
    return GpuNic(gpu, tuple(n for n, p in paths.items() if p == best), best)

"""`nvidia-smi -q`: the driver, its CUDA, each GPU's name and memory, and the GPUs it cannot
reach. One command answers every probe here: a batch runs it once."""

from __future__ import annotations

import re
from dataclasses import dataclass

from k3deploy.facts import Probe

COMMAND = "nvidia-smi -q"
CUDA = re.compile(r"^CUDA Version\s*:\s*([0-9]+\.[0-9]+)", re.M)
DRIVER = re.compile(r"^Driver Version\s*:\s*([0-9][0-9.]*)", re.M)
_GPU = re.compile(r"^GPU [0-9A-Fa-f:.]+$", re.M)
_NAME = re.compile(r"^\s+Product Name\s*:\s*(.+?)\s*$", re.M)
_FB = re.compile(r"FB Memory Usage\s*\n\s+Total\s*:\s*(\d+) MiB.*?\n\s+Used\s*:\s*(\d+) MiB",
                 re.S)
# What nvidia-smi prints, and only that, for a GPU that fell off the bus: driver format string
# "Unable to determine the device handle for GPU%s: %s" (older drivers: "for GPU %s"), the
# reason "Unknown Error" or "GPU is lost.  Reboot the system to recover this GPU".
_LOST = re.compile(r"Unable to determine the device handle for GPU ?([0-9A-Fa-f]+:[0-9A-Fa-f]+:"
                   r"[0-9A-Fa-f]+\.[0-9A-Fa-f]): (.+?)\s*$", re.M | re.I)


@dataclass(frozen=True)
class Gpu:
    name: str
    total_mib: int
    used_mib: int


@dataclass(frozen=True)
class LostGpu:
    bus_id: str
    reason: str


def parse_gpus(out: str, code: int) -> tuple[Gpu, ...] | None:
    """Every GPU nvidia-smi answered for; None when it failed."""
    if code != 0:
        return None
    gpus = []
    for section in _GPU.split(out)[1:]:
        name, fb = _NAME.search(section), _FB.search(section)
        if name and fb:
            gpus.append(Gpu(name.group(1), int(fb.group(1)), int(fb.group(2))))
    return tuple(gpus)


def parse_lost(out: str, code: int) -> tuple[LostGpu, ...]:
    """The GPUs nvidia-smi cannot reach; () when it answered."""
    if code == 0:
        return ()
    return tuple(LostGpu(m.group(1), m.group(2)) for m in _LOST.finditer(out))


def parse_cuda(out: str, code: int) -> str | None:
    m = CUDA.search(out)
    return m.group(1) if code == 0 and m else None


def parse_driver(out: str, code: int) -> str | None:
    m = DRIVER.search(out)
    return m.group(1) if code == 0 and m else None


def gpus() -> Probe[tuple[Gpu, ...] | None]:
    return Probe("gpus", COMMAND, parse_gpus)


def lost_gpus() -> Probe[tuple[LostGpu, ...]]:
    return Probe("gpus_lost", COMMAND, parse_lost)


def cuda() -> Probe[str | None]:
    return Probe("cuda", COMMAND, parse_cuda)


def driver() -> Probe[str | None]:
    return Probe("driver", COMMAND, parse_driver)

"""Which filesystem on a host holds the weights and Docker's data-root: the largest one on a
local NVMe device (the guide's Step 2: "local NVMe"), never the root filesystem (clouds put
the boot volume on NVMe too, e.g. EBS volumes on Nitro instances). Pure: the mounts come from
host_facts."""

from __future__ import annotations

import re
from dataclasses import dataclass

from k3deploy.node.host_facts import Mount

# Kernel and container file systems: never a place for 1.56 TB of weights.
PSEUDO = frozenset(("proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "mqueue",
                    "securityfs", "debugfs", "tracefs", "pstore", "bpf", "autofs", "hugetlbfs",
                    "configfs", "fusectl", "binfmt_misc", "overlay", "squashfs", "nsfs", "ramfs",
                    "rpc_pipefs", "efivarfs", "fuse.lxcfs", "nfsd"))
# The system's own directories (and the root): a data mount lives elsewhere.
SYSTEM = re.compile(r"^/($|(boot|dev|etc|proc|run|sys|usr|var|snap|tmp|root|home)(/|$))")
NVME = re.compile(r"^/dev/(nvme\d+n\d+(p\d+)?|md\d+|md/.+)$")   # md: RAID 0 over the NVMe disks


@dataclass(frozen=True)
class DataDisk:
    mount: Mount
    nvme: bool        # on an NVMe device (or an md array, which clouds build from them)


def _device(source: str) -> str:
    return source.split("[", 1)[0]   # findmnt shows a bind mount as DEVICE[/subdir]


def data_disk(mounts: list[Mount]) -> DataDisk | None:
    """The largest NVMe data filesystem; with none, the largest other data filesystem (the
    caller says it is not NVMe). Bind mounts of a subdirectory do not count."""
    seen: dict[str, Mount] = {}
    for m in mounts:
        if m.fstype in PSEUDO or SYSTEM.match(m.target) or "[" in m.source or m.size <= 0:
            continue
        seen[m.target] = m           # the last mount on a target is the one in effect
    data = sorted(seen.values(), key=lambda m: m.size, reverse=True)
    nvme = [m for m in data if NVME.match(_device(m.source))]
    if nvme:
        return DataDisk(nvme[0], True)
    return DataDisk(data[0], False) if data else None

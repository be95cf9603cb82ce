"""What `k3deploy init` makes of each host's answers: GPU model and count, driver and CUDA,
the data disk, and where the hosts disagree (named the way preflight names them: the GPU
model and count against the value most hosts have, the driver and CUDA through
steps/checks/sameness.py). Pure: the facts come from init_cmd."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from k3deploy.cluster.gpus import match_smi_name
from k3deploy.core import units
from k3deploy.facts.nvidia_smi import Gpu
from k3deploy.node.host_facts import Mount
from k3deploy.node.data_disk import DataDisk, data_disk
from k3deploy.steps.checks import sameness


T = TypeVar("T")
H = TypeVar("H", bound=Hashable)


@dataclass(frozen=True)
class Host:
    """One host as init found it (address, port: its SSH endpoint as given on the command
    line; port None: --port's)."""
    address: str
    name: str
    user: str | None
    gpu_name: str | None
    gpu: str | None          # the GPU table's key, None for a card k3deploy does not know
    gpu_count: int
    driver: str | None
    cuda: str | None
    disk: DataDisk | None
    port: int | None = None

    @property
    def endpoint(self) -> str:
        return self.address if self.port is None else f"{self.address} port {self.port}"


# A batch's values by fact name (node/facts.gather): each is what its own parser returned,
# read here by the type that parser returns (init_cmd.first_facts names them).
def items(value: object, kind: type[T]) -> list[T]:
    """The items of a list or tuple fact ([] when the fact read nothing)."""
    return [v for v in value if isinstance(v, kind)] if isinstance(value, (list, tuple)) else []


def text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def host_from(address: str, name: str, found: Mapping[str, object], port: int | None = None) -> Host:
    gpus = items(found.get("gpus"), Gpu)
    names = Counter(g.name for g in gpus)
    gpu_name = names.most_common(1)[0][0] if names else None
    model = match_smi_name(gpu_name) if gpu_name else None
    return Host(address, name, text(found.get("user")), gpu_name, model.key if model else None,
                len(gpus), text(found.get("driver")), text(found.get("cuda")),
                data_disk(items(found.get("mounts"), Mount)), port)


def common(values: list[H]) -> H:
    """The value most hosts have (the first host's on a tie)."""
    counts = Counter(values)
    best = max(counts.values())
    return next(v for v in values if counts[v] == best)


def problems(hosts: list[Host]) -> list[str]:
    """Why these hosts cannot be one cluster as they are, each naming its hosts."""
    found = [f"{h.name}: no GPU answered nvidia-smi" for h in hosts if not h.gpu_count]
    found += [f"{h.name}: {h.gpu_name!r} is no GPU k3deploy knows (k3deploy plan lists them)"
              for h in hosts if h.gpu_count and h.gpu is None]
    found += [f"{h.name}: no data filesystem found (findmnt shows none outside the system's own "
              "directories)" for h in hosts if h.disk is None]
    keys: tuple[tuple[str, Callable[[Host], str | int | None]], ...] = (
        ("GPU model", lambda h: h.gpu_name), ("GPU count", lambda h: h.gpu_count),
        ("data disk", lambda h: h.disk.mount.target if h.disk else None))
    for label, key in keys:
        want = common([key(h) for h in hosts])
        found += [f"{h.name}: {label} {key(h)} differs from the other hosts' {want}"
                  for h in hosts if key(h) != want and key(h)]
    found += [f"{node}: {message}" for node, _check, message
              in sameness.undeclared_problems({h.name: h for h in hosts})]
    return found


def summary(h: Host) -> str:
    disk = "no data disk"
    if h.disk:
        m = h.disk.mount
        disk = (f"{m.target} ({m.source} {m.fstype}, {units.size(m.size)}, "
                f"{units.size(m.avail)} free{'' if h.disk.nvme else ', NOT on an NVMe device'})")
    gpus = f"{h.gpu_count}x {h.gpu_name}" if h.gpu_count else "no GPU"
    return f"{gpus}, driver {h.driver}, CUDA {h.cuda}; {disk}"

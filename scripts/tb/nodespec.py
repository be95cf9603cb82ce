"""What each simulated node is: GPU model and count, driver, disk, user, pre-seeded config.

`--node NAME:KEY=VALUE` overrides one field of one node; the result is a NodeSpec per node and
the `node.json` the stand-ins read (docs/architecture.md, "Node runtime state").
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from tb import profiles as profiles_mod

GPUS = {  # model -> (nvidia-smi name, memory MiB)
    "h100": ("NVIDIA H100 80GB HBM3", 81559),
    "h200": ("NVIDIA H200", 143771),
    "b200": ("NVIDIA B200", 183359),
    "b300": ("NVIDIA B300 SXM6 AC", 275040),
}
DRIVERS = {  # driver CUDA version -> a driver release that reports it
    "13.0": "580.65.06",
    "12.9": "575.57.08",
    "12.8": "570.133.20",
    "12.4": "550.54.15",
}
USERS = ("root", "ubuntu")
_SIZE = re.compile(r"^[1-9][0-9]*[KMGkmg]?$")


class SpecError(ValueError):
    """Bad testbed arguments (exit code 2)."""


@dataclass(frozen=True)
class NodeSpec:
    name: str
    index: int
    gpu: str = "h100"
    gpus: int = 8
    cuda: str = "13.0"
    disk: str = "4G"
    daemon_json: str | None = None
    user: str = "root"
    load_seconds: float = 2.0
    pull_seconds: float = 0.5
    nvidia_toolkit: bool = True
    decode_tok_s: float = 0.0   # stand-in engine's single-stream decode rate (0: unpaced)
    compile_seconds: float = 0.0  # stand-in engine's kernel compile without a cache (engine/kernels.py)
    profiles: tuple[str, ...] = ()  # tb/profiles.py names, in the order given
    # A second private interface (eth1, ADDRESS/PREFIX) on a subnet of its own: a multi-homed
    # host as clouds rent them (a management or storage network beside the cluster's).
    second_nic: str | None = None
    # `up --shared-hf`: the testbed's one shared HF directory is bind-mounted at
    # nodefs.SHARED_HF_MOUNT; false (`--node NAME:shared_hf=false`): the node has only its own
    # empty directory there, as a machine whose mount is missing (node.py shared_hf_mount);
    # None (no --shared-hf): nothing is mounted there
    shared_hf: bool | None = None
    # One rank that fails at start as SGLang does (standins/engine/startfaults.py): oom at the
    # KV pool, an NCCL init error, or an image without the model's parsers.
    engine_fault: str | None = None

    def node_json(self) -> dict:
        gpu_name, mem_mib = GPUS[self.gpu]
        return {"name": self.name, "gpu": self.gpu, "gpu_name": gpu_name, "gpu_count": self.gpus,
                "gpu_mem_mib": mem_mib, "cuda": self.cuda, "driver": DRIVERS[self.cuda],
                "engine_load_seconds": self.load_seconds, "pull_seconds": self.pull_seconds,
                "nvidia_toolkit": self.nvidia_toolkit, "decode_tok_s": self.decode_tok_s,
                "engine_compile_seconds": self.compile_seconds,
                **({"engine_fault": self.engine_fault} if self.engine_fault else {}),
                **self.profile_settings()}

    def profile_settings(self) -> dict:
        """The chosen profiles ({group: name}) and their settings that are not NodeSpec fields
        (those were applied to the spec when the profile was named, so an explicit --node KEY
        given after it still wins)."""
        chosen = profiles_mod.resolve(self.profiles)
        fields = {f.name for f in dataclasses.fields(self)}
        extra = {k: v for k, v in profiles_mod.settings(chosen).items() if k not in fields}
        return {"profiles": chosen, **extra}


def _parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise SpecError(f"not a boolean: {text!r}")


def _parse_count(text: str) -> int:
    count = int(text)
    if not 0 <= count <= 16:
        raise SpecError(f"GPU count must be 0..16, got {count}")
    return count


def _parse_choice(choices):
    def parse(text: str) -> str:
        if text not in choices:
            raise SpecError(f"{text!r} is not one of {', '.join(choices)}")
        return text
    return parse


def _parse_size(text: str) -> str:
    if not _SIZE.match(text):
        raise SpecError(f"disk size must look like 4G, 512M or 65536K, got {text!r}")
    return text


def _parse_seconds(text: str) -> float:
    seconds = float(text)
    if seconds < 0:
        raise SpecError(f"seconds must be >= 0, got {text}")
    return seconds


def _parse_second_nic(text: str) -> str:
    import ipaddress
    try:
        iface = ipaddress.IPv4Interface(text)
    except ValueError:
        raise SpecError(f"second_nic wants a private IPv4 ADDRESS/PREFIX, got {text!r}") from None
    if "/" not in text or not iface.ip.is_private or iface.network.prefixlen > 30:
        raise SpecError(f"second_nic wants a private IPv4 ADDRESS/PREFIX (prefix <= 30), got {text!r}")
    if iface.ip in ipaddress.ip_network("10.213.0.0/16"):
        raise SpecError(f"second_nic {text}: 10.213.0.0/16 holds the testbeds' own subnets")
    return str(iface)


PARSERS = {
    "gpus": _parse_count, "gpu": _parse_choice(tuple(GPUS)), "cuda": _parse_choice(tuple(DRIVERS)),
    "disk": _parse_size, "daemon_json": str, "user": _parse_choice(USERS),
    "load_seconds": _parse_seconds, "pull_seconds": _parse_seconds,
    "nvidia_toolkit": _parse_bool, "decode_tok_s": _parse_seconds,
    "compile_seconds": _parse_seconds,
    "profile": str, "second_nic": _parse_second_nic, "shared_hf": _parse_bool,
    "engine_fault": _parse_choice(("oom", "nccl", "parser")),
}


def parse_override(text: str) -> tuple[str, str, object]:
    """'node1:user=ubuntu' -> ('node1', 'user', 'ubuntu'). The value may contain ':' and '='."""
    name, sep, rest = text.partition(":")
    key, eq, value = rest.partition("=")
    if not sep or not eq or not name:
        raise SpecError(f"--node wants NAME:KEY=VALUE, got {text!r}")
    if key not in PARSERS:
        raise SpecError(f"--node key {key!r} unknown; known: {', '.join(PARSERS)}")
    try:
        return name, key, PARSERS[key](value)
    except ValueError as err:
        raise SpecError(f"--node {name}:{key}: {err}") from None


def with_profiles(spec: NodeSpec, names: list[str]) -> NodeSpec:
    """spec with profiles appended; their settings that are NodeSpec fields applied now."""
    try:
        profiles_mod.resolve(names)
    except profiles_mod.ProfileError as err:
        raise SpecError(str(err)) from None
    fields = {f.name for f in dataclasses.fields(spec)}
    changes = {}
    for name in names:
        changes.update({k: v for k, v in profiles_mod.PROFILES[name].settings.items() if k in fields})
    return dataclasses.replace(spec, profiles=spec.profiles + tuple(names), **changes)


def build_specs(count: int, defaults: dict, overrides: list[str],
                profile_names: list[str] | None = None) -> list[NodeSpec]:
    if not 1 <= count <= 200:
        raise SpecError(f"--nodes must be 1..200, got {count}")
    for key, value in defaults.items():
        PARSERS[key](str(value).lower() if isinstance(value, bool) else str(value))
    specs = {f"node{i}": with_profiles(NodeSpec(name=f"node{i}", index=i, **defaults), profile_names or [])
             for i in range(count)}
    for text in overrides:
        name, key, value = parse_override(text)
        if name not in specs:
            raise SpecError(f"--node {text!r}: no node named {name!r} (nodes are node0..node{count - 1})")
        if key == "profile":
            specs[name] = with_profiles(specs[name], profiles_mod.split_names(value))
        else:
            specs[name] = dataclasses.replace(specs[name], **{key: value})
    return list(specs.values())


def spec_from_dict(data: dict) -> NodeSpec:
    data = dict(data)
    data["profiles"] = tuple(data.get("profiles", ()))
    return NodeSpec(**data)

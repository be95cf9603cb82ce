"""Facts several steps share: GPUs, CUDA, docker, the engine container, the HF cache."""

from __future__ import annotations

import json
import re
import shlex

from k3deploy.node import facts as F

# One `nvidia-smi -q` serves every GPU fact: the driver, its CUDA, each GPU's name and memory.
NVSMI = ["nvidia-smi", "-q"]
CUDA = re.compile(r"^CUDA Version\s*:\s*([0-9]+\.[0-9]+)", re.M)
DRIVER = re.compile(r"^Driver Version\s*:\s*([0-9][0-9.]*)", re.M)
_GPU = re.compile(r"^GPU [0-9A-Fa-f:.]+$", re.M)
_NAME = re.compile(r"^\s+Product Name\s*:\s*(.+?)\s*$", re.M)
_FB = re.compile(r"FB Memory Usage\s*\n\s+Total\s*:\s*(\d+) MiB.*?\n\s+Used\s*:\s*(\d+) MiB",
                 re.S)


def parse_gpus(out: str, code: int) -> list[dict] | None:
    if code != 0:
        return None
    gpus = []
    for section in _GPU.split(out)[1:]:
        name, fb = _NAME.search(section), _FB.search(section)
        if name and fb:
            gpus.append({"name": name.group(1), "total_mib": int(fb.group(1)),
                         "used_mib": int(fb.group(2))})
    return gpus


def parse_cuda(out: str, code: int) -> str | None:
    m = CUDA.search(out)
    return m.group(1) if code == 0 and m else None


def parse_driver(out: str, code: int) -> str | None:
    m = DRIVER.search(out)
    return m.group(1) if code == 0 and m else None


def parse_json(out: str, code: int):
    if code != 0:
        return None
    try:
        return json.loads(out)
    except json.JSONDecodeError:
        return None


def gpus() -> F.Fact:
    return F.command("gpus", NVSMI, parse_gpus)


def cuda() -> F.Fact:
    return F.command("cuda", NVSMI, parse_cuda)


def driver() -> F.Fact:
    return F.command("driver", NVSMI, parse_driver)


# One `docker info` serves every daemon fact; None when docker or its daemon is missing.
DOCKER_INFO = "command -v docker >/dev/null && docker info --format '{{json .}}'"


def docker_info(name: str, key: str) -> F.Fact:
    """One field of `docker info`: a string as it is, anything else as JSON text."""
    def parse(out: str, code: int):
        data = parse_json(out, code)
        value = data.get(key) if isinstance(data, dict) else None
        return value if value is None or isinstance(value, str) else json.dumps(value)
    return F.Fact(name, DOCKER_INFO, parse, sudo=True)


def docker_root() -> F.Fact:
    return docker_info("docker_root", "DockerRootDir")


def images(tags: list[str]) -> F.Fact:
    """Each present tag -> its image id and registry digests, in one `docker image inspect`
    (it prints the ones it has and exits 1 when any is missing)."""
    def parse(out: str, _code: int) -> dict:
        data = parse_json(out, 0)
        return {tag: {"id": doc.get("Id"), "digests": doc.get("RepoDigests") or []}
                for doc in (data if isinstance(data, list) else []) for tag in doc.get("RepoTags") or []}
    return F.Fact("images", f"docker image inspect {shlex.join(tags)} 2>/dev/null", parse, sudo=True)


def container(name: str) -> F.Fact:
    """The engine container as `docker inspect` reports it, or None when there is none."""
    def parse(out: str, code: int):
        data = parse_json(out, code)
        return data[0] if isinstance(data, list) and data else None
    return F.command("container", ["docker", "inspect", "--type", "container", name], parse,
                     sudo=True)


def container_summary(info: dict | None) -> dict | None:
    if not info:
        return None
    state = info.get("State", {})
    config = info.get("Config", {})
    return {"status": state.get("Status"), "running": bool(state.get("Running")),
            "exit_code": state.get("ExitCode"), "image": config.get("Image"),
            "labels": config.get("Labels") or {}, "cmd": config.get("Cmd") or [],
            "finished": state.get("FinishedAt"), "started": state.get("StartedAt")}


def file_json(name: str, path: str, sudo: bool = False) -> F.Fact:
    return F.Fact(name, f"cat {shlex.quote(path)}", parse_json, sudo=sudo)

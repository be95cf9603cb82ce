"""Facts several steps share: GPUs, CUDA, docker, the engine container, the HF cache."""

from __future__ import annotations

import json
import re
import shlex

from k3deploy.node import facts as F

CUDA = re.compile(r"CUDA Version:\s*([0-9]+\.[0-9]+)")
DRIVER = re.compile(r"Driver Version:\s*([0-9][0-9.]*)")


def parse_gpus(out: str, code: int) -> list[dict] | None:
    if code != 0:
        return None
    gpus = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and parts[1].isdigit():
            gpus.append({"name": parts[0], "total_mib": int(parts[1]), "used_mib": int(parts[2])})
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
    return F.command("gpus", ["nvidia-smi", "--query-gpu=name,memory.total,memory.used",
                              "--format=csv,noheader,nounits"], parse_gpus)


def cuda() -> F.Fact:
    return F.command("cuda", ["nvidia-smi"], parse_cuda)


def driver() -> F.Fact:
    return F.command("driver", ["nvidia-smi"], parse_driver)


def docker_root() -> F.Fact:
    return F.command("docker_root", ["docker", "info", "--format", "{{.DockerRootDir}}"],
                     F.text, sudo=True)


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

"""The engine container as `docker inspect` shows it: the probe, and the typed `Container`.

The parser lives in remote/docker_inspect.py (standard library, no package imports) because
the serve-time guard on the node reads its engine with it too; this module is the laptop's
name for it. One command answers both the container and the candidate image tags (images
are read from the same answer by steps/probes.py parse_images), so a batch runs it once."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from k3deploy.remote.protocol import JSON
from k3deploy.facts import Probe
from k3deploy.remote.docker_inspect import GO_ZERO_TIME, Container, documents, parse_inspect

__all__ = ["GO_ZERO_TIME", "Container", "documents", "parse_inspect", "inspect_script",
           "container_probe", "summary", "Image"]


@dataclass(frozen=True)
class Image:
    """A present image reference: its image id and registry digests."""
    id: str | None
    digests: tuple[str, ...] = ()


def inspect_script(name: str, refs: list[str]) -> str:
    """One untyped `docker inspect` of the container and every candidate image reference."""
    return f"docker inspect {shlex.join([name, *refs])} 2>/dev/null"


def container_probe(name: str, refs: list[str]) -> Probe[Container | None]:
    """The container named `name`, or None when there is none."""
    return Probe("container", inspect_script(name, refs), lambda out, _code: parse_inspect(out),
                 sudo=True)


def summary(found: Container | None) -> dict[str, JSON] | None:
    """The container in `k3deploy status --json` (these keys are that document's)."""
    if found is None:
        return None
    return {"id": found.id, "status": found.status, "running": found.running,
            "exit_code": found.exit_code, "image": found.image, "labels": {**found.labels},
            "cmd": [*found.cmd], "started": found.started, "finished": found.finished}

"""`docker inspect` read once: the container among the objects it printed, as a typed record.

Standard library only and free of its siblings, so the laptop imports it (facts/docker.py
re-exports it) and the guard ships it beside guard.py (node/guard_config.py SCRIPTS) and
reads its own engine with the same parser.

The document's fields: moby api/swagger.yaml@v28.5.1, ContainerInspectResponse (Id; Image,
the ID of the image it was created from; State; Config) with ContainerState (Status,
Running, ExitCode, StartedAt, FinishedAt) and ContainerConfig (Image, the reference it was
run as; Cmd; Labels). Untyped, `docker inspect A B ...` prints every object it finds (a
container, images) in one JSON list and exits 1 when any name is missing; only containers
have a State. Times are RFC 3339 as Go prints them (trailing zeros of the fraction trimmed);
one never set is Go's zero time, GO_ZERO_TIME.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TypedDict, cast

GO_ZERO_TIME = "0001-01-01T00:00:00Z"


@dataclass(frozen=True)
class Container:
    id: str
    status: str                  # created | running | paused | restarting | removing | exited | dead
    running: bool
    exit_code: int               # 0 while it runs; 128 when dockerd could not start it
    started: str                 # StartedAt (GO_ZERO_TIME: never started)
    finished: str                # FinishedAt (GO_ZERO_TIME: has not stopped yet)
    image: str                   # Config.Image: the reference it was run as (a tag)
    image_id: str                # Image: the ID of that image (sha256:...)
    labels: dict[str, str]
    cmd: tuple[str, ...]


class InspectState(TypedDict, total=False):
    """ContainerState, the fields read (moby api/swagger.yaml@v28.5.1)."""
    Status: str
    Running: bool
    ExitCode: int
    StartedAt: str
    FinishedAt: str


class InspectConfig(TypedDict, total=False):
    """ContainerConfig, the fields read; Labels and Cmd are null when unset."""
    Image: str
    Labels: dict[str, str] | None
    Cmd: list[str] | None


class InspectDoc(TypedDict, total=False):
    """One object `docker inspect` printed: a container (with State), or an image."""
    Id: str
    Image: str
    State: InspectState
    Config: InspectConfig


def documents(raw: str) -> list[InspectDoc]:
    """Every object `docker inspect` printed; [] when it printed no JSON list (docker or
    its daemon missing, only an error on stderr)."""
    try:
        data = json.loads(raw)
    except ValueError:
        return []
    # moby's schema (InspectDoc) vouches for the objects' fields; json.loads cannot
    return [cast(InspectDoc, d) for d in data if isinstance(d, dict)] if isinstance(data, list) else []


def parse_inspect(raw: str) -> Container | None:
    """The container in a `docker inspect` answer; None when there is none (a missing
    container prints `[]`, or only images were found). The exit code says nothing more:
    1 whenever any other name asked alongside was missing."""
    doc = next((d for d in documents(raw) if "State" in d), None)
    return None if doc is None else container(doc)


def container(doc: InspectDoc) -> Container:
    state: InspectState = doc.get("State") or {}
    config: InspectConfig = doc.get("Config") or {}
    return Container(
        id=doc.get("Id") or "", status=state.get("Status") or "", running=bool(state.get("Running")),
        exit_code=int(state.get("ExitCode") or 0), started=state.get("StartedAt") or GO_ZERO_TIME,
        finished=state.get("FinishedAt") or GO_ZERO_TIME, image=config.get("Image") or "",
        image_id=doc.get("Image") or "", labels=dict(config.get("Labels") or {}),
        cmd=tuple(str(c) for c in config.get("Cmd") or ()))

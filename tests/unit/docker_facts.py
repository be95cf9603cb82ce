"""Engine containers for unit tests: a facts.docker.Container with the fields a test does not
name as a running engine's `docker inspect` gives them (tests/fixtures/real/docker/28.5.1/
container-inspect-running.json); exited: code 137, the SIGKILL a `docker stop` ends with. A
misspelt field is a TypeError (dataclasses.replace)."""

from __future__ import annotations

import dataclasses

from k3deploy.facts.docker import GO_ZERO_TIME, Container

ID = "e575172ed11dc01bfce087fb27bee502db149e1a0fad7c296ad300bbff178148"
IMAGE_ID = "sha256:2b8fd9751c4c0f5dd266fcae00707e67a2545ef34f9a29354585f93dac906749"


def container(running: bool = True, **fields) -> Container:
    base = Container(id=ID, status="running" if running else "exited", running=running,
                     exit_code=0 if running else 137, started="2026-12-01T10:00:00Z",
                     finished=GO_ZERO_TIME if running else "2026-12-01T10:05:00Z",
                     image="lmsysorg/sglang:kimi-k3", image_id=IMAGE_ID, labels={}, cmd=())
    if "cmd" in fields:
        fields["cmd"] = tuple(str(c) for c in fields["cmd"])
    return dataclasses.replace(base, **fields)

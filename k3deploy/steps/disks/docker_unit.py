"""docker.service as systemd runs it: a data-root given on dockerd's command line.

dockerd refuses to start when a directive is given both as a flag and in daemon.json
("unable to configure the Docker daemon with file /etc/docker/daemon.json: the following
directives are specified both as a flag and in the configuration file: data-root: (from flag:
..., from file: ...)", moby daemon/config/config.go@docker-v29.1.2 MergeDaemonConfigurations,
wrapped in daemon/command/daemon.go; docs.docker.com/engine/daemon "Configuration conflicts").
So the flag is read from the unit before daemon.json is written, and a restart never happens
into that refusal. docker.service ships Restart=always, RestartSec=2, StartLimitBurst=3,
StartLimitIntervalSec=60 (moby contrib/init/systemd/docker.service@docker-v29.1.2): a start
that fails is retried by systemd itself until the limit, after which every start is refused
until `systemctl reset-failed` (systemctl(1): it resets the start rate limit counter).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING

from k3deploy.core.errors import StepFailed
from k3deploy.node import facts as F
from k3deploy.node.context import NodeContext

if TYPE_CHECKING:
    from k3deploy.steps.base import Action

UNIT = "docker.service"
DATA_ROOT_FLAGS = ("--data-root", "-g", "--graph")   # -g/--graph: its name before 17.05


def unit_fact() -> F.Fact[str | None]:
    """`systemctl cat docker.service`: every file systemd reads for the unit, in order, each
    after a `# <path>` line (systemd src/systemctl/systemctl-cat.c)."""
    return F.command("docker_unit", ["systemctl", "cat", UNIT], F.raw)


def _exec_start_lines(text: str) -> list[tuple[str, str]]:
    """(file, command) of the ExecStart= in force: an empty `ExecStart=` in a drop-in clears
    the list (systemd.service(5)), so the last ones after the last reset count."""
    found: list[tuple[str, str]] = []
    path, joined = "", ""
    for line in text.splitlines():
        if line.startswith("# /"):
            path = line[2:].strip()
            continue
        joined += line[:-1] + " " if line.endswith("\\") else line
        if line.endswith("\\"):
            continue
        key, sep, value = joined.strip().partition("=")
        joined = ""
        if sep and key.strip() == "ExecStart":
            found = [] if not value.strip() else found + [(path, value.strip())]
    return found


def data_root_flag(text: str | None) -> tuple[str, str, str] | None:
    """(unit file, flag as written, its value) when dockerd is given a data-root flag."""
    for path, command in _exec_start_lines(text or ""):
        words = shlex.split(command.lstrip("-@:+!"))
        for i, word in enumerate(words):
            name, eq, value = word.partition("=")
            if name in DATA_ROOT_FLAGS:
                if eq:
                    return path, word, value
                if i + 1 < len(words):
                    return path, f"{word} {words[i + 1]}", words[i + 1]
    return None


def refuse_flag_with_file(unit: str | None, node: NodeContext, wanted: str, step: str) -> None:
    """Before daemon.json gets a data-root: a flag in the unit (`unit_fact`'s text) would stop
    dockerd starting."""
    found = data_root_flag(unit)
    if found is None:
        return
    path, flag, value = found
    raise StepFailed(
        node.name, f"dockerd is started with `{flag}` (ExecStart in {path}); with data-root "
        f"also in /etc/docker/daemon.json dockerd refuses to start (\"the following directives "
        f"are specified both as a flag and in the configuration file: data-root\"). Nothing was "
        "changed; docker keeps running", step=step,
        hint=f"remove `{flag}` from ExecStart in {path}, then `sudo systemctl daemon-reload` and "
        f"re-run (k3deploy sets data-root {wanted} in daemon.json); or set "
        f"paths.docker_root: {value} "
        "in the inventory")


def restart_actions(cmd: Callable[..., Action]) -> list[Action]:
    """Stop and start docker, the start preceded by reset-failed so that earlier failed
    starts (systemd's own Restart=always retries count too) do not trip the start limit."""
    return [cmd("stop docker", "systemctl", "stop", "docker", "docker.socket", sudo=True,
                retry=True),
            cmd("clear docker's failed starts", "systemctl", "reset-failed", UNIT,
                "docker.socket", sudo=True, retry=True),
            cmd("start docker", "systemctl", "start", "docker", sudo=True)]

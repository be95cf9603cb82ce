"""A docker start that fails after nvme changed daemon.json: put the previous daemon.json back
and start docker again, so docker is never left stopped or failed by k3deploy.

dockerd prints the error that stops it as one line on stderr and exits 1 (moby
cmd/dockerd/docker.go@v28.5.1 main: onError, `fmt.Fprintf(stderr, "%s\\n", err)`;
cmd/dockerd/main.go@docker-v29.1.2: `fmt.Fprintln(stderr, err)`), e.g. "failed to start daemon:
error initializing graphdriver: ..." (cmd/dockerd/daemon.go@v28.5.1, layer/layer_store.go) or
"unable to configure the Docker daemon with file ...". Under systemd that line is in the
journal as `dockerd[PID]: <error>`, among dockerd's logrus lines (`time="..." level=info
msg=...`, its text format) and systemd's own (`systemd[1]: ...`). `journalctl -u docker` prints
the short format, "mostly identical to ... classic syslog files" (journalctl(1) --output=short):
`MMM DD HH:MM:SS HOST IDENT[PID]: MESSAGE`.

The journal is read right after the failed start: the restored dockerd's own start-up lines
would push the error out of the last lines. A start after `reset-failed` is never refused by
systemd's start limit (docker_unit).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TypeVar

from pydantic import BaseModel

from k3deploy.core.errors import CommandError, StepFailed
from k3deploy.steps.disks import docker_unit
from k3deploy.node.context import NodeContext
from k3deploy.steps.base import Action, Step, cmd

DAEMON_JSON = "/etc/docker/daemon.json"
PREVIOUS = DAEMON_JSON + ".k3deploy-previous"   # the file as it was before nvme wrote it
FAILED = DAEMON_JSON + ".k3deploy-failed"       # nvme's version that dockerd refused
JOURNAL = ("journalctl", "-u", "docker", "-n", "30", "--no-pager")
F = TypeVar("F")   # the step's facts: read by none here
START, BACKUP = "docker-start", "daemon-json-backup"   # action tags nvme's apply looks for

# IDENT is dockerd (docker before 17.06 ran `docker daemon`; RHEL's build `dockerd-current`).
_ENTRY = re.compile(r"^\S+ +\d+ \d\d:\d\d:\d\d \S+ (?:dockerd?(?:-current)?)\[\d+\]: (.*)$")


def dockerd_error(journal: str | None) -> str | None:
    """dockerd's last line that is not one of its logrus log lines: the error it exited on."""
    found = None
    for line in (journal or "").splitlines():
        entry = _ENTRY.match(line.rstrip())
        if entry and entry.group(1).strip() and not entry.group(1).startswith('time="'):
            found = entry.group(1).strip()
    return found


def backup(present: bool) -> list[Action]:
    """Before daemon.json is replaced: its copy, for the rollback (nothing when absent)."""
    if not present:
        return []
    return [replace(cmd(f"keep the current {DAEMON_JSON}", "cp", "-p", DAEMON_JSON, PREVIOUS,
                        sudo=True, retry=True), tag=BACKUP)]


def tag_start(actions: list[Action]) -> list[Action]:
    return [replace(a, tag=START) if a.description == "start docker" else a for a in actions]


def rollback_actions(wrote: bool, backed_up: bool) -> list[Action]:
    """nvme's daemon.json aside, the previous one back (none when there was none), and docker
    started past its start limit. A file nvme did not write this run stays where it is."""
    actions = [cmd(f"keep the refused {DAEMON_JSON} as {FAILED}", "mv", "-f", DAEMON_JSON, FAILED,
                   sudo=True, retry=True)] if wrote else []
    if wrote and backed_up:
        actions.append(cmd(f"put the previous {DAEMON_JSON} back", "mv", "-f", PREVIOUS,
                           DAEMON_JSON, sudo=True, retry=True))
    return actions + docker_unit.restart_actions(cmd)[1:]


def roll_back(step: Step[F, BaseModel], node: NodeContext, wrote: bool, backed_up: bool,
              wanted: str) -> None:
    """After `systemctl start docker` failed: read dockerd's error, restore, start, check, and
    fail the step with what dockerd said."""
    journal = step.run_command(node, Action("read dockerd's error", tuple(JOURNAL), sudo=True,
                                            retry=True, check=False))
    said = dockerd_error(journal.stdout) or "its error is not in the journal's last 30 lines"
    restarted = None
    for action in rollback_actions(wrote, backed_up):
        try:
            step.run_action(node, action)
        except CommandError as err:
            restarted = err
            break
    active = step.run_command(node, Action("is docker active", ("systemctl", "is-active", "docker"),
                                           check=False))
    raise failure(node.name, step.name, said, wanted, (wrote, backed_up),
                  active.stdout.strip() == "active", restarted)


def failure(node: str, step: str, said: str, wanted: str, files: tuple[bool, bool],
            active: bool, restarted: CommandError | None) -> StepFailed:
    """files: (nvme wrote daemon.json this run, there was one before)."""
    wrote, backed_up = files
    before = (f"put back the previous {DAEMON_JSON}" if backed_up else
              f"removed its {DAEMON_JSON} (there was none before)") if wrote else \
        f"left {DAEMON_JSON} as it was (this run did not change it)"
    kept = f"; the refused file is kept as {FAILED}" if wrote else ""
    if active:
        state = f"k3deploy {before} and docker runs again with its old data-root{kept}"
    else:
        why = f" ({restarted.command}: {(restarted.tail(1) or ['exited non-zero'])[-1]})" \
            if restarted else ""
        state = f"k3deploy {before}{kept}, but docker did not start again{why}: docker is DOWN"
    message = f"dockerd refused to start with data-root {wanted}: \"{said}\". {state}"
    return StepFailed(node, message, step=step, hint=hint_for(said, wanted, active))


_HINTS = (
    ("without d_type support", "the filesystem under {wanted} has no d_type (xfs made with "
     "ftype=0): reformat it with `mkfs.xfs -n ftype=1`, or set paths.docker_root to a directory "
     "on a filesystem with d_type (`xfs_info` shows ftype=1), then re-run"),
    ("don't match any configuration option", "remove the key dockerd names from "
     f"{DAEMON_JSON} (this dockerd does not know it), then re-run"),
)


def hint_for(said: str, wanted: str, active: bool) -> str:
    for needle, hint in _HINTS:
        if needle in said:
            found = hint.format(wanted=wanted)
            break
    else:
        found = (f"fix what dockerd names (`sudo journalctl -u docker -n 30 --no-pager` on the "
                 f"node; {FAILED} is what it refused), or set paths.docker_root elsewhere, then "
                 "re-run")
    if not active:
        found = "start docker first (`sudo systemctl reset-failed docker; sudo systemctl start " \
                f"docker`, then `journalctl -u docker`); then {found}"
    return found

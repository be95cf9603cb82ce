"""guard / guard-stop: the serve-time guard on every node (remote/guard.py).

`guard` runs after verify, so a guard never acts before its engine finished loading. A healthy
guard with the same config digest is left alone; one with another digest, or one that already
fired (it never acts twice), is replaced, and the incident it recorded is archived: verify has
just passed, so the cluster serves again. `guard-stop` ends the guards first in `down` (a
teardown is not an incident) and before `up --replace` swaps the containers they watch.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex

from pydantic import BaseModel, ConfigDict

from k3deploy.node import run_settle
from k3deploy.node import detached
from k3deploy.node import facts as F
from k3deploy.node import guard_config
from k3deploy.remote import script_text
from k3deploy.steps import node_files, probes, regroup
from k3deploy.steps.base import Action, Step, cmd, upload

BEAT_STALE = 60  # seconds: the guard rewrites its state every 10 s while alive
START_WAIT = 150  # tenths of a second the start waits for the new guard's first state


def _pids(out: str, code: int) -> list[int]:
    """Guard processes from `pid ppid` lines. A guard's subprocess.run (docker wait/inspect) is,
    between its fork and exec, a copy with the guard's own command line: a pid whose parent is
    itself a guard is that window, not a second guard."""
    pairs = [tuple(int(x) for x in line.split()) for line in out.splitlines()
             if len(line.split()) == 2 and all(x.isdigit() for x in line.split())]
    found = {pid for pid, _ in pairs}
    return [pid for pid, ppid in pairs if ppid not in found]


def process_pattern(paths: dict) -> str:
    """pgrep -f's pattern for a guard: anchored on the guard's own argv, because other facts
    of the same batch run at the same time with the guard's path in their command line
    (`sh -c 'sha256sum .../guard.py'`). The interpreter is matched by name only: a shim
    (pyenv) execs python3 by its full path."""
    return f"^[^ ]*python[0-9.]* {re.escape(paths['script'])}( |$)"


def guard_facts(inv) -> list[F.Fact]:
    """One round trip: the guard's own state file, its processes, the node's clock, incident."""
    paths = guard_config.node_paths(inv)
    pattern = process_pattern(paths)
    return [probes.file_json("guard_state", paths["state"], sudo=True),
            # The parent pid from /proc/PID/stat (the field after the state, which follows
            # the parenthesised name): no `ps` per guard in every look.
            F.Fact("guard_pids", f"for p in $(pgrep -f -- {shlex.quote(pattern)}); do "
                   'if read -r s < "/proc/$p/stat"; then s=${s##*) }; set -- $s; '
                   'echo "$p $2"; fi; done 2>/dev/null; true', _pids, sudo=True),
            F.native("now", "now", [], F.integer),
            probes.file_json("incident", paths["incident"], sudo=True)]


def healthy(found: dict, digest: str) -> bool:
    state = found.get("guard_state") or {}
    return (found["guard_pids"] == [state.get("pid")] and state.get("phase") == "watching"
            and state.get("digest") == digest
            and (found.get("now") or 0) - state.get("beat", 0) < BEAT_STALE)


def stop_actions(found: dict) -> list[Action]:
    pids = [str(p) for p in found["guard_pids"]]
    if not pids:
        return []
    # SIGTERM ends a guard at once and leaves the engine alone; SIGKILL if it does not.
    return [cmd(f"stop the guard (pid {', '.join(pids)})", "sh", "-c",
                detached.stop(" ".join(pids), tenths=50), sudo=True)]


RELAUNCHED_AFTER = "relaunched-after-incident"


def archive_action(inv, tag: str = "archive-incident", incident: object = None) -> Action:
    """Move the incident record away; `incident`, when the bring-up recovers from it, is kept
    in the run's ledger for the certificate (what stopped the group, how fast it came back)."""
    paths = guard_config.node_paths(inv)
    script = (f"mkdir -p {shlex.quote(paths['archive'])} && mv -f {shlex.quote(paths['incident'])}"
              f" {shlex.quote(paths['archive'])}/incident-$(date +%Y%m%dT%H%M%S).json")
    return dataclasses.replace(cmd("archive the incident record", "sh", "-c", script, sudo=True),
                               tag=tag, note=incident)


class StartGuard(Step):
    name = "guard"
    needs_all_nodes = True

    def prepare(self, run) -> None:
        run_settle.guard_secret(run)

    def config(self, node) -> dict:
        return guard_config.with_digest(guard_config.config(node.inv, node.name),
                                    node.run.inputs.guard_secret or "")

    def probes(self, node):
        paths = guard_config.node_paths(node.inv)
        scripts = [f"{paths['dir']}/{name}" for name in guard_config.SCRIPTS]
        return guard_facts(node.inv) + [node_files.fact(scripts, sudo=True)]

    def plan(self, facts, node):
        if not node.inv.guard.enabled:
            return stop_actions(facts)
        if healthy(facts, self.config(node)["digest"]):
            return []
        archive = ([archive_action(node.inv, RELAUNCHED_AFTER, facts["incident"])]
                   if facts["incident"] else [])
        return (stop_actions(facts) + archive
                + node_files.changed_only(self._start_actions(node), facts.get(node_files.FACT)))

    def _start_actions(self, node) -> list[Action]:
        paths, cfg = guard_config.node_paths(node.inv), self.config(node)
        argv = ["python3", paths["script"], paths["config"]]
        started = detached.start(argv, paths["log"], paths["state"], tenths=START_WAIT)
        uploads = [upload(f"upload {name}", f"{paths['dir']}/{name}", script_text(name),
                          mode=0o644, sudo=True) for name in guard_config.SCRIPTS]
        return [cmd("create the guard dir (0700)", "install", "-d", "-m", "700", paths["dir"],
                    sudo=True, retry=True),
                *uploads,
                upload("write the guard config", paths["config"], _json(cfg), sudo=True),
                upload("write the guard secret (0600)", paths["secret"],
                       f"{node.run.inputs.guard_secret or ''}\n", sudo=True),  # None: --check
                cmd("start the guard, detached", "sh", "-c", started, sudo=True)]

    def inputs(self, node):
        return {"guard": node.inv.guard.model_dump(), "port": node.inv.ports.guard}

    def detail(self, facts, node):
        state = facts.get("guard_state") or {}
        return {"pid": state.get("pid"), "digest": state.get("digest")}


class StopGuard(Step):
    name = "guard-stop"
    runs_after_failures = True

    class Params(BaseModel):
        model_config = ConfigDict(extra="forbid")
        # Before launch a watching guard stays, unless `up --replace` swaps the container it
        # watches. A spent one (it fired) always goes: left alive, it would serve its old
        # incident to the new guards started after verify, and they would adopt it and stop the
        # group they guard. Its incident stays on record until the guard step archives it.
        # The group is relaunched whole (steps/regroup.py) too: every guard goes, or one
        # would call its engine's removal an incident and stop the group being started.
        before_launch: bool = False
        archive: bool = True

    @property
    def settles(self) -> bool:
        return self.p.before_launch

    def probes(self, node):
        return guard_facts(node.inv) + (regroup.probes_for(node.inv) if self.p.before_launch
                                        else [])

    def settle(self, all_facts, run) -> regroup.Regroup:
        states = {n: f.get(regroup.FACT) for n, f in all_facts.items()}
        decided = regroup.decide(states, run.inv)
        if decided.whole and run.ui:
            run.ui.say(f"{'':>14}{decided.reason()}")
        return decided

    def plan(self, facts, node):
        if self.p.before_launch:
            spent = (facts.get("guard_state") or {}).get("phase") == "fired"
            decided = node.run.ledger.decided(regroup.Regroup)
            whole = decided is not None and decided.whole
            return stop_actions(facts) if spent or whole or node.run.option("replace") else []
        archive = [archive_action(node.inv)] if self.p.archive and facts["incident"] else []
        return stop_actions(facts) + archive


def _json(doc: dict) -> str:
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"

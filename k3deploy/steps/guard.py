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
from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from k3deploy.cluster.inventory import Inventory
from k3deploy.core.jsonvalue import JSON
from k3deploy.facts import record
from k3deploy.facts.docker import Container
from k3deploy.facts.guard import FIRED, WATCHING, GuardState, Incident, parse_incident, \
    parse_pids, parse_state
from k3deploy.node import run_settle
from k3deploy.node import detached
from k3deploy.node import facts as F
from k3deploy.node import guard_config
from k3deploy.node.context import NodeContext, RunContext
from k3deploy.node.guard_config import GuardPaths
from k3deploy.remote import protocol, script_text
from k3deploy.steps import node_files
from k3deploy.steps.engine import regroup
from k3deploy.steps.base import Action, AnyFact, Step, cmd, upload

BEAT_STALE = 60  # seconds: the guard rewrites its state every 10 s while alive
START_WAIT = 150  # tenths of a second the start waits for the new guard's first state


@dataclass(frozen=True)
class GuardFacts:
    """What both guard steps (and `status`) see of a node's guard: guard_facts' probes."""
    guard_state: GuardState | None
    guard_pids: tuple[int, ...]
    now: int | None                  # the node's clock (the state's beat is on it)
    incident: Incident | None
    node_files: dict[str, str] | None = None   # guard: the scripts on the node, path -> sha256
    container: Container | None = None         # guard-stop before launch: regroup's look

    @property
    def spent(self) -> bool:
        return self.guard_state is not None and self.guard_state.phase == FIRED

    def reading(self) -> protocol.Reading:
        """The state file as every node document is read (protocol.reading): its writer is
        alive when its pid is among the guard processes found; `written` is its beat."""
        state = self.guard_state
        live = state.pid if state is not None and state.pid in self.guard_pids else None
        return protocol.reading(dataclasses.asdict(state) if state else None, protocol.GUARD,
                                live, state.beat if state else None,
                                float(self.now) if self.now is not None else None)

    def beat_age(self) -> float:
        """Seconds since the guard last wrote its state (the node's clock); from the epoch
        when it never did."""
        return (self.now or 0) - (self.guard_state.beat if self.guard_state else 0)


def looked(found: Mapping[str, object], prefix: str = "") -> GuardFacts:
    """guard_facts' values, asked under `prefix` in a batch of other facts (status)."""
    return record(GuardFacts, {name[len(prefix):]: value for name, value in found.items()
                               if name.startswith(prefix)})


def process_pattern(paths: GuardPaths) -> str:
    """pgrep -f's pattern for a guard: anchored on the guard's own argv, because other facts
    of the same batch run at the same time with the guard's path in their command line
    (`sh -c 'sha256sum .../guard.py'`). The interpreter is matched by name only: a shim
    (pyenv) execs python3 by its full path."""
    return f"^[^ ]*python[0-9.]* {re.escape(paths.script)}( |$)"


def guard_facts(inv: Inventory) -> list[AnyFact]:
    """One round trip: the guard's own state file, its processes, the node's clock, incident."""
    paths = guard_config.node_paths(inv)
    pattern = process_pattern(paths)
    return [F.read("guard_state", paths.state, parse_state, sudo=True),
            # The parent pid from /proc/PID/stat (the field after the state, which follows
            # the parenthesised name): no `ps` per guard in every look.
            F.Fact("guard_pids", f"for p in $(pgrep -f -- {shlex.quote(pattern)}); do "
                   'if read -r s < "/proc/$p/stat"; then s=${s##*) }; set -- $s; '
                   'echo "$p $2"; fi; done 2>/dev/null; true', parse_pids, sudo=True),
            F.native("now", "now", [], F.integer),
            F.read("incident", paths.incident, parse_incident, sudo=True)]


def healthy(facts: GuardFacts, digest: str) -> bool:
    state, seen = facts.guard_state, facts.reading()
    return (state is not None and seen.alive and seen.state == WATCHING
            and facts.guard_pids == (state.pid,) and state.digest == digest
            and facts.beat_age() < BEAT_STALE)


def stop_actions(facts: GuardFacts) -> list[Action]:
    pids = [str(p) for p in facts.guard_pids]
    if not pids:
        return []
    # SIGTERM ends a guard at once and leaves the engine alone; SIGKILL if it does not.
    return [cmd(f"stop the guard (pid {', '.join(pids)})", "sh", "-c",
                detached.stop(" ".join(pids), tenths=50), sudo=True)]


RELAUNCHED_AFTER = "relaunched-after-incident"


def archive_action(inv: Inventory, tag: str = "archive-incident", incident: Incident | None = None,
                   if_there: bool = False) -> Action:
    """Move the incident record away; `incident`, when the bring-up recovers from it, is kept
    in the run's ledger for the certificate (what stopped the group, how fast it came back).
    `if_there`: only if there is one by then (a guard being stopped may just have written it)."""
    paths = guard_config.node_paths(inv)
    record = shlex.quote(paths.incident)
    script = (f"mkdir -p {shlex.quote(paths.archive)} && mv -f {record}"
              f" {shlex.quote(paths.archive)}/incident-$(date +%Y%m%dT%H%M%S).json")
    if if_there:
        script = f"if [ -e {record} ]; then {script}; fi"
    return dataclasses.replace(cmd("archive the incident record", "sh", "-c", script, sudo=True),
                               tag=tag, note=incident)


class StartGuard(Step[GuardFacts]):
    name = "guard"
    needs_all_nodes = True
    Facts = GuardFacts

    def prepare(self, run: RunContext) -> None:
        run_settle.guard_secret(run)

    def config(self, node: NodeContext) -> dict[str, JSON]:
        link = router_link(node)
        return guard_config.with_digest(guard_config.config(node.inv, node.name, link),
                                        node.run.inputs.guard_secret or "", link)

    def probes(self, node: NodeContext) -> list[AnyFact]:
        paths = guard_config.node_paths(node.inv)
        scripts = [f"{paths.dir}/{name}" for name in guard_config.scripts(self.config(node))]
        return guard_facts(node.inv) + [node_files.fact(scripts, sudo=True)]

    def plan(self, facts: GuardFacts, node: NodeContext) -> list[Action]:
        if not node.inv.guard.enabled:
            return stop_actions(facts)
        digest = self.config(node)["digest"]   # with_digest's str (a guard's is never else)
        if isinstance(digest, str) and healthy(facts, digest):
            return []
        archive = ([archive_action(node.inv, RELAUNCHED_AFTER, facts.incident)]
                   if facts.incident else [])
        return (stop_actions(facts) + archive
                + node_files.changed_only(self._start_actions(node), facts.node_files))

    def _start_actions(self, node: NodeContext) -> list[Action]:
        paths, cfg, link = guard_config.node_paths(node.inv), self.config(node), router_link(node)
        argv = ["python3", paths.script, paths.config]
        started = detached.start(argv, paths.log, paths.state, tenths=START_WAIT)
        uploads = [upload(f"upload {name}", f"{paths.dir}/{name}", script_text(name),
                          mode=0o644, sudo=True) for name in guard_config.scripts(cfg)]
        if link is not None:   # a fleet's group: its guard takes it out of the router first
            uploads.append(upload("write the router's admin key (0600)", paths.router_key,
                                  f"{link.admin_key}\n", sudo=True))
        return [cmd("create the guard dir (0700)", "install", "-d", "-m", "700", paths.dir,
                    sudo=True, retry=True),
                *uploads,
                upload("write the guard config", paths.config, _json(cfg), sudo=True),
                upload("write the guard secret (0600)", paths.secret,
                       f"{node.run.inputs.guard_secret or ''}\n", sudo=True),  # None: --check
                cmd("start the guard, detached", "sh", "-c", started, sudo=True)]

    def inputs(self, node: NodeContext) -> dict[str, object]:
        link = router_link(node)
        return {"guard": node.inv.guard.model_dump(), "port": node.inv.ports.guard,
                **({"router": [link.base, link.worker]} if link else {})}

    def detail(self, facts: GuardFacts, node: NodeContext) -> dict[str, JSON] | None:
        state = facts.guard_state
        return {"pid": state.pid if state else None, "digest": state.digest if state else None}


class StopGuardParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # Before launch a watching guard stays, unless `up --replace` swaps the container it
    # watches. A spent one (it fired) always goes: left alive, it would serve its old
    # incident to the new guards started after verify, and they would adopt it and stop the
    # group they guard. Its incident stays on record until the guard step archives it.
    # The group is relaunched whole (steps/engine/regroup.py) too: every guard goes, or one
    # would call its engine's removal an incident and stop the group being started.
    before_launch: bool = False
    archive: bool = True


class StopGuard(Step[GuardFacts, StopGuardParams]):
    name = "guard-stop"
    runs_after_failures = True
    Facts = GuardFacts
    Params = StopGuardParams

    @property
    def settles(self) -> bool:
        return self.p.before_launch

    def probes(self, node: NodeContext) -> list[AnyFact]:
        # regroup's look fills `container` (regroup.FACT)
        return guard_facts(node.inv) + (regroup.probes_for(node.inv) if self.p.before_launch
                                        else [])

    def settle(self, all_facts: dict[str, GuardFacts], run: RunContext) -> regroup.Regroup:
        states = {n: f.container for n, f in all_facts.items()}
        decided = regroup.decide(states, run.inv)
        if decided.whole and run.ui:
            run.ui.say(f"{'':>14}{decided.reason()}")
        return decided

    def plan(self, facts: GuardFacts, node: NodeContext) -> list[Action]:
        if self.p.before_launch:
            decided = node.run.ledger.decided(regroup.Regroup)
            whole = decided is not None and decided.whole
            return stop_actions(facts) if facts.spent or whole or node.run.option("replace") \
                else []
        if not self.p.archive:
            return stop_actions(facts)
        # A guard still running may record an incident between this look and its stop (a node
        # lost while `down` runs: its peers' guards fire): whatever it left is archived after.
        racing = bool(facts.guard_pids) and not facts.incident
        if not facts.incident and not racing:
            return []
        return stop_actions(facts) + [archive_action(node.inv, if_there=racing)]


def router_link(node: NodeContext) -> guard_config.RouterLink | None:
    """A fleet's group's router, as the fleet's run hands it over (run/fleet_run.py); None for a
    one-group inventory."""
    link = node.run.option(guard_config.ROUTER_OPTION)
    return link if isinstance(link, guard_config.RouterLink) else None


def _json(doc: dict[str, JSON]) -> str:
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"

"""k3deploy watch: follow the cluster from the laptop, one line per change of state.

With --restart N, an incident (the guards stopped the group) is answered by running the
bring-up again, at most N times, with a growing pause between attempts; past that, watch
exits 1 naming every incident it saw (a fleet: cli/fleet_watch.py). Ctrl-C ends watch at
once; the guards keep running on the nodes (they never needed the laptop).

Pauses are interrupt.sleep, the one stop mechanism: it ends at once on a stop request (raised
as Interrupted, as during a bring-up, whose run installs the handlers) and on a plain Ctrl-C
(KeyboardInterrupt, raised out of the wait by Python's default handler, which run_watch
installs). watch installs no stop-event handler: it has nothing to record, and a Ctrl-C
during a status round should not wait for that round's SSH threads.
"""

from __future__ import annotations

import signal
import sys
import time
from typing import TypedDict, Unpack

from rich.console import Console

from k3deploy.cli import cluster_state, fleet_watch
from k3deploy.cli.status_doc import Observed
from k3deploy.cluster.fleet import Fleet
from k3deploy.core.jsonvalue import JSON
from k3deploy.core import interrupt
from k3deploy.core.errors import EXIT_STEP_FAILED, Interrupted, K3Error
from k3deploy.core.status import NOT_THROUGH
from k3deploy.run.ui import Ui

BACKOFF_FIRST, BACKOFF_MAX = 10.0, 300.0


class SessionOptions(TypedDict, total=False):
    accept_new_host_keys: bool
    state_dir: str | None




def backoff(attempt: int) -> float:
    """Seconds before restart `attempt` (1-based): a crash loop should not hammer the nodes."""
    return min(BACKOFF_MAX, BACKOFF_FIRST * 2.0 ** (attempt - 1))


def incident_key(incident: dict[str, JSON]) -> tuple[JSON, JSON, JSON]:
    failure = incident.get("failure") or {}
    if not isinstance(failure, dict):
        failure = {}
    return failure.get("node"), failure.get("at"), failure.get("kind")


def say(text: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}", flush=True)


class Watch:
    def __init__(self, inv_path: str, restart: int | None, interval: float,
                 **session: Unpack[SessionOptions]):
        self.inv_path, self.restart, self.interval = inv_path, restart, interval
        self.session = session
        self.incidents: list[dict[str, JSON]] = []
        self.attempts = 0
        self.last_line: str | None = None

    def observe(self) -> Observed:
        from k3deploy.cli.status_cmd import collect
        try:
            return collect(self.inv_path, self.session.get("accept_new_host_keys", False),
                           self.session.get("state_dir"), detail=False)["cluster"]
        except K3Error as err:
            return {"name": "?", "state": "unknown", "incident": None, "error": str(err)}

    def show(self, cluster: Observed) -> None:
        error = cluster.get("error")
        line = cluster_state.line(cluster["name"], cluster) + (f" ({error})" if error else "")
        if line != self.last_line:
            say(line)
            self.last_line = line

    def note(self, incident: dict[str, JSON]) -> None:
        if incident_key(incident) not in {incident_key(i) for i in self.incidents}:
            self.incidents.append(incident)

    def bring_up(self) -> int:
        from k3deploy.run.run_steps import playbook_steps, run_steps
        quiet = Ui(console=Console(stderr=True, quiet=True))
        try:
            report = run_steps(self.inv_path, playbook_steps("bringup"), ui=quiet,
                               summary=False, state_dir=self.session.get("state_dir"),
                               accept_new_host_keys=self.session.get("accept_new_host_keys",
                                                                     False))
        except Interrupted:  # Ctrl-C during the bring-up ends watch too, not just this attempt
            raise
        except K3Error as err:  # another run holds the cluster, an inventory now broken...
            say(f"bring-up failed: {err.lines()[0]}")
            return err.exit_code
        failed = [f"{node}/{step}: {(r.error or [r.status])[0]}"
                  for node, per in report.results.items() for step, r in per.items()
                  if r.status in NOT_THROUGH]
        say(f"bring-up {'verified the endpoint again' if report.exit_code() == 0 else 'failed'}"
            + (f": {failed[0]}" if failed else ""))
        return report.exit_code()

    def run(self) -> int:
        while True:
            cluster = self.observe()
            self.show(cluster)
            incident = cluster["incident"]
            if cluster["state"] == cluster_state.STOPPED and self.restart is not None:
                if incident is not None:   # the guards' state comes with its incident
                    self.note(incident)
                if self.attempts >= self.restart:
                    return self.give_up()
                self.attempts += 1
                pause = backoff(self.attempts)
                say(f"restart {self.attempts} of {self.restart} in {pause:.0f}s")
                interrupt.sleep(pause)
                self.bring_up()
                self.last_line = None  # show the state after the bring-up, even if unchanged
                continue
            interrupt.sleep(self.interval)

    def give_up(self) -> int:
        say(f"giving up after {self.attempts} restart(s); {len(self.incidents)} incident(s):")
        for number, incident in enumerate(self.incidents, 1):
            failure = incident.get("failure") or {}
            if not isinstance(failure, dict):
                failure = {}
            say(f"  incident {number}: {failure.get('cause')} at {failure.get('at')} "
                f"(seen by {incident.get('seen_by')})")
        return EXIT_STEP_FAILED


class FleetWatch(Watch):
    """watch on a fleet (cli/fleet_watch.py): a look is the fleet's status, a restart its `up`."""

    def __init__(self, fleet: Fleet, restart: int | None, interval: float,
                 **session: Unpack[SessionOptions]):
        super().__init__(fleet.source, restart, interval, **session)
        self.fleet, self.text = fleet, ""

    def observe(self) -> Observed:
        accept, state_dir = self.session.get("accept_new_host_keys", False), self.session.get("state_dir")
        seen, self.text, doc = fleet_watch.observe(self.fleet, accept, state_dir)
        for line in fleet_watch.mend(self.fleet, doc, accept, state_dir) if doc else []:
            say(line)
        return seen

    def show(self, cluster: Observed) -> None:
        if self.text != self.last_line:
            say(self.text)
            self.last_line = self.text

    def bring_up(self) -> int:
        code, line = fleet_watch.bring_up(self.fleet, self.session.get("accept_new_host_keys", False),
                                          self.session.get("state_dir"))
        say(line)
        return code


def refuse_bad_input(inv_path: str) -> None:
    """Bad input is refused once, at the start (exit 2), not watched as "unknown" forever; an
    inventory broken later, while watching, is shown as a state like any other."""
    from k3deploy.cli.fleet_cmd import fleet_of
    from k3deploy.cluster import inventory as inventory_mod
    from k3deploy.node.keyfiles import check_key_files
    fleet = fleet_of(inv_path)   # a fleet: each group's (an invalid fleet: InventoryError here)
    for inv in [g.inventory for g in fleet.groups] if fleet else [inventory_mod.load(inv_path)]:
        check_key_files(inv)


def run_watch(inv_path: str, *, restart: int | None, interval: float,
              **session: Unpack[SessionOptions]) -> int:
    # Explicitly, as a run's handlers are (interrupt.handling): a shell starts background jobs
    # with SIGINT ignored, and Python then installs no KeyboardInterrupt of its own.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from k3deploy.cli.fleet_cmd import fleet_of
    fleet = fleet_of(inv_path)
    try:
        if fleet is not None:
            return FleetWatch(fleet, restart, interval, **session).run()
        return Watch(inv_path, restart, interval, **session).run()
    except (KeyboardInterrupt, Interrupted) as err:
        say("watch ended; the guards keep running on the nodes")
        sys.stdout.flush()
        # At once: SSH threads of a status or bring-up in flight are not waited for.
        code = err.exit_code if isinstance(err, Interrupted) else 130
        interrupt.exit_process(code)
        return code   # a test's stand-in for the exit returns

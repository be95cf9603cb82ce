"""`up` and `down` on a fleet: each group by the one-group machinery as it is (the same
playbook, the group's own Inventory, state dir, lock and certificates), then the router.

Groups run in turn, not at once: a run owns the process's Ctrl-C handling and the terminal's
table (run/run_steps.py), and one group's failure reads plainly before the next begins; on the
testbed and on a real fleet alike each group's bring-up is most of its weights' download, which
each group's nodes pull over their own links, so in turn costs wall time, not correctness.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console

from k3deploy.cluster import router_service as svc
from k3deploy.cluster.fleet import Fleet
from k3deploy.core import interrupt
from k3deploy.core import log as klog
from k3deploy.core.errors import EXIT_OK, EXIT_PARTIAL, EXIT_STEP_FAILED, K3Error, UnreachableError
from k3deploy.core.state import ClusterLock, state_dir_for
from k3deploy.node import fleet_keys, guard_config
from k3deploy.node.context import RunContext
from k3deploy.node.fleet_keys import FleetKeys
from k3deploy.node.secretfile import cluster_secret
from k3deploy.run.fleet_router import FleetRouter
from k3deploy.run.report import RunReport
from k3deploy.run.run_steps import playbook_steps, run_steps, single
from k3deploy.run.ui import Ui
from k3deploy.steps.base import AnyStep

Closing = Callable[[], Callable[[RunContext, RunReport], list[str]]]


class FleetRun:
    def __init__(self, fleet: Fleet, *, check: bool, accept_new_host_keys: bool,
                 state_dir: str | None, log_json: bool):
        self.fleet, self.check, self.log_json = fleet, check, log_json
        self.accept, self.state_dir = accept_new_host_keys, state_dir
        self.ui = Ui(console=Console(stderr=True, quiet=True) if log_json else None)
        self.dir = state_dir_for(fleet.source, fleet.cluster, state_dir)

    def say(self, line: str) -> None:
        self.ui.say(line, wrap=False)
        if self.log_json:
            klog.get().info("fleet.note", text=line)

    def keys(self, create: bool, groups: bool = True) -> FleetKeys | None:
        """groups: each group's key file made the fleet's (up); `down` only reads the keys."""
        dirs = {g.name: state_dir_for(g.inventory.source, g.inventory.cluster, self.state_dir)
                for g in self.fleet.groups} if groups else {}
        return fleet_keys.load_or_create(self.fleet.groups[0].inventory, self.dir, dirs, create)

    def router_link(self, group: str) -> dict[str, object]:
        """The run option by which the guard step tells a fleet's group's guards where the router
        is, to take the group out of it first on an incident (steps/guard.py): once the fleet's
        admin key exists (the first `up` makes it before any group runs)."""
        admin = cluster_secret(self.dir, fleet_keys.ADMIN_SECRET, create=False)
        return {} if admin is None else {
            guard_config.ROUTER_OPTION: guard_config.router_link(self.fleet, group, admin)}

    def group_run(self, name: str, what: str, steps: list[AnyStep], options: dict[str, object],
                  after: Closing | None = None) -> int:
        """One group's run of `steps` by the one-group machinery (up, down, roll); its exit code."""
        interrupt.check()
        group = next(g for g in self.fleet.groups if g.name == name)
        self.say(f"fleet {self.fleet.cluster}: {what} of group {name} "
                 f"({', '.join(n.name for n in group.inventory.nodes)})")
        report = run_steps(group.inventory, steps, check=self.check,
                           options={**options, **self.router_link(name)},
                           accept_new_host_keys=self.accept, state_dir=self.state_dir,
                           log_json=self.log_json, after=after() if after else None)
        return report.exit_code()

    # -- up ---------------------------------------------------------------------------------
    def up(self, options: dict[str, object], closing: Closing) -> int:
        # Ctrl-C between two groups, or while the router is set up, ends the run as within a
        # group's (Interrupted, 130): every group is then up and verified, or named by its run.
        with interrupt.handling(), ClusterLock(self.dir):
            keys = self.keys(create=not self.check)
            codes = {g.name: self.group_run(g.name, "bring-up", playbook_steps("bringup"),
                                         dict(options), closing)
                     for g in self.fleet.groups}
            verified = {name for name, code in codes.items() if code == EXIT_OK}
            failed = [name for name in codes if name not in verified]
            if keys is None:   # --check before the first up: no keys, no router to ask
                self.say(f"would start the router on {self.fleet.router_node().name} and "
                         "register every group that verifies")
                return EXIT_OK
            self._router_up(keys, verified)
        if failed:
            self.say(f"fleet {self.fleet.cluster}: group(s) {', '.join(failed)} did not come up "
                     "and are not registered with the router; fix them (their lines above), "
                     f"then `k3deploy up -i {self.fleet.source}` again")
            return EXIT_STEP_FAILED
        if not self.check:
            self.say(f"fleet {self.fleet.cluster}: serving at {svc.client_url(self.fleet)} "
                     f"({len(verified)} groups behind the router)")
        return EXIT_OK

    def _router_up(self, keys: FleetKeys, verified: set[str]) -> None:
        """Each line said as soon as it is true: a failure further on (StepFailed, exit 1)
        leaves what was done on the screen above its lines."""
        with FleetRouter(self.fleet, keys, self.accept) as router:
            started = router.ensure_running(self.check)
            for line in started:
                self.say(line)
            if self.check and not started[0].endswith(": running"):
                self.say(f"would register group(s) {', '.join(sorted(verified)) or '-'}")
                return
            for line in router.reconcile(verified, self.check):
                self.say(line)
            if verified and not self.check:
                router.wait_ready(verified)
                self.say(router.verify())

    # -- down -------------------------------------------------------------------------------
    def down(self, options: dict[str, object], wipe_weights: bool = False) -> int:
        with interrupt.handling(), ClusterLock(self.dir):
            keys = self.keys(create=False, groups=False)
            router = FleetRouter(self.fleet, keys, self.accept) if keys else None
            try:
                codes = self._down_groups(router, options, wipe_weights)
            finally:
                if router is not None:
                    router.conn.close()
        if EXIT_STEP_FAILED in codes:
            return EXIT_STEP_FAILED
        return EXIT_PARTIAL if EXIT_PARTIAL in codes else EXIT_OK

    def _down_groups(self, router: FleetRouter | None, options: dict[str, object],
                     wipe_weights: bool) -> list[int]:
        reachable = router is not None
        codes = []
        for group in self.fleet.groups:
            if router is not None and reachable:
                reachable = self._out_of_router(router, group.name)
            # each run its own step objects (a step keeps what it saw during its run)
            steps = playbook_steps("teardown") + (single("wipe-weights") if wipe_weights else [])
            codes.append(self.group_run(group.name, "teardown", steps, dict(options)))
        if router is not None:
            codes.append(self._stop_router(router) if reachable else EXIT_PARTIAL)
        return codes

    def _out_of_router(self, router: FleetRouter, name: str) -> bool:
        """Take the group out of the router; False when the router's node is out of reach
        (reported; the groups are torn down all the same)."""
        group = next(g for g in router.groups if g.name == name)
        try:
            if router.host.look().container is None:
                return True     # no router: nothing to take it out of
            for line in router.deregister(group, self.check):
                self.say(line)
        except UnreachableError as err:
            self.say(f"router node {err.node} could not be reached: {err}; the groups are "
                     "torn down without it")
            return False
        except K3Error as err:   # a router that does not answer: stopped below all the same
            self.say(f"router: could not remove group {name}: {err}")
        return True

    def _stop_router(self, router: FleetRouter) -> int:
        try:
            self.say(router.stop(self.check))
        except UnreachableError as err:
            self.say(f"router node {err.node} could not be reached: {err}")
            return EXIT_PARTIAL
        return EXIT_OK

"""`roll` on a fleet (issue 54): relaunch its groups one at a time, the endpoint serving
throughout. Each group in turn: out of the router, drained, its engines stopped and started
again by the one-group machinery (weights kept; its own verify, a chat with reasoning, must
pass), registered again, and waited for until the router reports it ready; then the next.

What SMG does that this relies on (smg-project/smg@f8daa883):
- `DELETE /workers/{id}` is a job (202) that marks a Ready worker `Draining`, so no policy
  selects it again, sleeps --drain-settle-secs (5) and then removes it
  (model_gateway/src/workflow/steps/local/drain_workers.rs). It does not wait for the
  requests in flight: they hold the worker through their load guard and keep streaming
  (model_gateway/src/routers/http/router.rs route_typed_request_once, WorkerLoadGuard), so
  stopping the engine then would cut them. Hence the drain below, on the engine's own count.
- The router's per-worker count (`load` in `GET /workers`, `smg_worker_requests_active`) is
  no drain signal: the worker leaves the list after the settle, and its gauge is set to 0 at
  removal while requests are still running (observability/metrics.rs remove_worker_metrics).
  The engine's `/v1/loads` counts them until they end (remote/router_admin.py engine_load).
- A request that gets a retryable status (5xx, 408, 429) is sent again to a worker picked
  anew, up to --retry-max-retries (5) (routers/http/router.rs, routers/common/retry.rs
  is_retryable_status); a stream already answering is not. So only streams are at risk, and
  a drained group has none.
"""

from __future__ import annotations

import time
from typing import NamedTuple

from k3deploy.cluster import fleet_registry as reg
from k3deploy.cluster import router_service as svc
from k3deploy.core import interrupt
from k3deploy.core.errors import EXIT_OK, BadInputError, Interrupted, K3Error, StepFailed
from k3deploy.core.state import ClusterLock
from k3deploy.node.router_host import STEP
from k3deploy.remote.router_reconcile import LEAVING, Worker, norm_url
from k3deploy.run.fleet_router import FleetRouter
from k3deploy.run.fleet_run import Closing, FleetRun
from k3deploy.run.run_steps import playbook_steps, single

DRAIN_TIMEOUT = 300.0     # seconds a group's requests in flight may take to finish
UNKNOWN_LOAD_GRACE = 10.0  # an engine without /v1/loads: this long after the DELETE
POLL = 0.5
# The relaunch is a bring-up of weights already there: no dry-fire, no fabric mesh.
RELAUNCH_OPTIONS: dict[str, object] = {"no_dry_fire": True, "no_fabric": True}
WAIT, DRAINED, DEADLINE = "wait", "drained", "deadline"
# where a group's roll stands (for the lines a Ctrl-C or a failure leaves)
OUT, STOPPING, REGISTERING, DONE = "out", "stopping", "registering", "done"


class RollOptions(NamedTuple):
    allow_outage: bool = False
    drain_timeout: float = DRAIN_TIMEOUT


# -- pure ----------------------------------------------------------------------------------
def refusal(groups: int, allow_outage: bool, source: str) -> BadInputError | None:
    """A one-group fleet has no other group to serve while its one is relaunched."""
    if groups > 1 or allow_outage:
        return None
    return BadInputError(f"{source}: a fleet of one group cannot roll without an outage: its "
                         "endpoint is down while that group is relaunched",
                         hint=f"`k3deploy roll -i {source} --allow-outage` to take it down "
                              "anyway, or add a group to the fleet")


def order(names: list[str], ready: set[str]) -> list[str]:
    """The groups the router does not report ready first (relaunching them costs no
    capacity, and they are back before a serving one goes out), then the rest; fleet order."""
    return [n for n in names if n not in ready] + [n for n in names if n in ready]


def groups_where(workers: list[Worker], groups: list[reg.GroupEndpoint],
                 ready_only: bool) -> set[str]:
    """The groups the router holds (an entry not on its way out), or reports ready."""
    status = {norm_url(w["url"]): w.get("status") for w in workers if w.get("status") != LEAVING}
    return {g.name for g in groups if norm_url(g.url) in status
            and (not ready_only or status[norm_url(g.url)] == reg.READY)}


def listed(workers: list[Worker], group: reg.GroupEndpoint) -> bool:
    """The router still lists the group, in any state (draining included)."""
    return any(norm_url(w["url"]) == norm_url(group.url) for w in workers)


def drain_verdict(in_router: bool, load: int | None, waited: float, timeout: float) -> str:
    """WAIT, DRAINED or DEADLINE. in_router: the router still lists the group (its DELETE is
    settling); load: requests running or waiting on its engine (None: it does not say)."""
    if waited >= timeout:
        return DEADLINE
    if in_router:
        return WAIT
    if load is None:
        return DRAINED if waited >= UNKNOWN_LOAD_GRACE else WAIT
    return DRAINED if load == 0 else WAIT


def left_line(name: str, at: str | None, source: str) -> str:
    """Where a group stands when the roll stops (Ctrl-C or a failure)."""
    if at in (None, DONE):
        return f"group {name}: serving, in the router" + (" (relaunched)" if at else "")
    if at == OUT:
        return (f"group {name}: out of the router (draining or drained), its engines still "
                f"running; `k3deploy up -i {source}` registers it again")
    if at == STOPPING:
        return (f"group {name}: out of the router, its relaunch stopped half-way; "
                f"`k3deploy up -i {source}` brings it up and registers it")
    return (f"group {name}: relaunched and verified, registered with the router, which "
            f"reports it ready after its health checks (`k3deploy status -i {source}`)")


# -- the roll ------------------------------------------------------------------------------
class FleetRoll:
    def __init__(self, run: FleetRun, router: FleetRouter, closing: Closing, opts: RollOptions):
        self.run, self.router, self.closing, self.opts = run, router, closing, opts
        self.at: dict[str, str] = {}          # group -> where its roll stands
        self.held: set[str] = set()           # the groups the router should hold

    @property
    def source(self) -> str:
        return self.run.fleet.source

    def workers(self) -> list[Worker]:
        return self.router.host.workers(self.router.keys.admin)

    def execute(self) -> int:
        workers = self.workers()
        self.held = groups_where(workers, self.router.groups, ready_only=False)
        ready = groups_where(workers, self.router.groups, ready_only=True)
        plan = order([g.name for g in self.router.groups], ready)
        self.run.say(f"fleet {self.run.fleet.cluster}: roll {', '.join(plan)}, one at a time "
                     f"(ready in the router now: {', '.join(sorted(ready)) or 'none'})")
        if self.run.check:
            self.run.say("would take each out of the router, drain it (at most "
                         f"{self.opts.drain_timeout:.0f}s), relaunch and verify it, register it "
                         "and wait until the router reports it ready")
            return EXIT_OK
        for name in plan:
            if (code := self.one(name)) != EXIT_OK:
                return code
        self.run.say(self.router.verify())
        self.run.say(f"fleet {self.run.fleet.cluster}: rolled {len(plan)} group(s); serving at "
                     f"{svc.client_url(self.run.fleet)}")
        return EXIT_OK

    def one(self, name: str) -> int:
        group = next(g for g in self.router.groups if g.name == name)
        try:
            interrupt.check()     # Ctrl-C between two groups: each serving, and said so
            self.take_out(group)
            if (code := self.relaunch(name)) != EXIT_OK:
                self.run.say(f"group {name} did not come back from its relaunch (its lines "
                             "above); fix that, then `k3deploy up -i "
                             f"{self.source}` brings it up and registers it")
                self.say_left()
                return code
            self.put_back(group)
        except Interrupted as err:
            err.details += self.left()
            raise
        except K3Error:
            self.say_left()
            raise
        return EXIT_OK

    def take_out(self, group: reg.GroupEndpoint) -> None:
        ready = groups_where(self.workers(), self.router.groups, ready_only=True)
        if ready == {group.name} and not self.opts.allow_outage:
            raise StepFailed(self.router.host.node, f"no group but {group.name} is ready in the "
                             "router: taking it out would take the endpoint down", step=STEP,
                             hint=f"`k3deploy up -i {self.source}` brings the others back; or "
                             "roll with --allow-outage")
        self.at[group.name] = OUT
        for line in self.router.deregister(group):
            self.run.say(line)
        self.held.discard(group.name)
        self.drain(group)

    def drain(self, group: reg.GroupEndpoint) -> None:
        start, seen = time.monotonic(), 0      # seen: the most requests in flight once out
        while True:
            waited = time.monotonic() - start
            in_router = listed(self.workers(), group)
            load = None if in_router else self.engine_load(group)
            seen = max(seen, load or 0)
            verdict = drain_verdict(in_router, load, waited, self.opts.drain_timeout)
            if verdict != WAIT:
                self.run.say(drain_line(group.name, verdict, load, waited, seen))
                return
            interrupt.sleep(POLL)

    def engine_load(self, group: reg.GroupEndpoint) -> int | None:
        """The group's engine's requests in flight, asked from the router's node (which
        reaches every group's head: it routes to them)."""
        answer = self.router.host.admin(self.router.keys.admin, "load", url=group.url,
                                        api_key=self.router.keys.serving)
        load = answer.get("load")
        return load if isinstance(load, int) else None

    def relaunch(self, name: str) -> int:
        self.at[name] = STOPPING
        code = self.run.group_run(name, "stop of the engines", single("guard-stop")
                                  + single("teardown"), {})
        if code != EXIT_OK:
            return code
        return self.run.group_run(name, "relaunch", playbook_steps("bringup"),
                                  dict(RELAUNCH_OPTIONS), self.closing)

    def put_back(self, group: reg.GroupEndpoint) -> None:
        self.at[group.name] = REGISTERING
        self.held.add(group.name)
        for line in self.router.reconcile(self.held):
            self.run.say(line)
        self.router.wait_ready({group.name})
        self.at[group.name] = DONE
        self.run.say(f"group {group.name}: relaunched, verified and ready in the router again")

    def left(self) -> list[str]:
        return [left_line(g.name, self.at.get(g.name), self.source) for g in self.router.groups]

    def say_left(self) -> None:
        for line in self.left():
            self.run.say(line)


def drain_line(name: str, verdict: str, load: int | None, waited: float, seen: int = 0) -> str:
    """seen: the most requests in flight on its engine once the router had let it go."""
    if verdict == DRAINED:
        known = (f"{seen} request(s) in flight finished" if seen else "no request in flight") \
            if load == 0 else "its engine reports no load"
        return f"group {name}: drained ({known}, {waited:.0f}s after its removal)"
    return (f"group {name}: still {load if load is not None else 'some'} request(s) in flight "
            f"after {waited:.0f}s (--drain-timeout); relaunched with them (they fail)")


def roll(run: FleetRun, closing: Closing, opts: RollOptions) -> int:
    """The roll under the fleet's lock, Ctrl-C ending it as a group's run ends (Interrupted,
    naming where every group stands). BadInputError for a one-group fleet (refusal)."""
    fleet = run.fleet
    if refused := refusal(len(fleet.groups), opts.allow_outage, fleet.source):
        raise refused
    with interrupt.handling(), ClusterLock(run.dir):
        keys = run.keys(create=False)
        if keys is None:
            raise K3Error(f"fleet {fleet.cluster} was never brought up: nothing to roll",
                          hint=f"`k3deploy up -i {fleet.source}`")
        with FleetRouter(fleet, keys, run.accept) as router:
            if not (found := router.host.look().container) or not found.running:
                raise StepFailed(router.host.node, f"the {router.where} is not running",
                                 step=STEP, hint=f"`k3deploy up -i {fleet.source}` starts it "
                                 "and registers the groups; then roll")
            return FleetRoll(run, router, closing, opts).execute()

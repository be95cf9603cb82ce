"""`verify` on a fleet: each group's own verify (the one-group step: its endpoint, a chat with
reasoning, its memory), then the router: running, holding every group and reporting it ready,
and a chat through it answered with reasoning_content. Changes nothing: a group the router does
not hold is named with the fix (`up`, or `watch`, registers it), not registered here."""

from __future__ import annotations

from k3deploy.cluster import fleet_registry as reg
from k3deploy.core import interrupt
from k3deploy.core.errors import EXIT_OK, EXIT_STEP_FAILED, EndpointError, K3Error
from k3deploy.run.fleet_router import FleetRouter
from k3deploy.run.fleet_run import FleetRun
from k3deploy.run.run_steps import single


def verify(run: FleetRun) -> int:
    with interrupt.handling():
        keys = run.keys(create=False, groups=False)
        if keys is None:
            raise EndpointError(f"fleet {run.fleet.cluster} was never brought up from this laptop "
                                "(no router keys)", hint=f"k3deploy up -i {run.fleet.source}")
        codes = {g.name: run.group_run(g.name, "verify", single("verify"), {})
                 for g in run.fleet.groups}
        with FleetRouter(run.fleet, keys, run.accept) as router:
            problems = _router_problems(router, keys.admin)
            if not problems:
                run.say(router.verify())
    for line in problems:
        run.say(line)
    failed = [name for name, code in codes.items() if code != EXIT_OK]
    if failed:
        run.say(f"fleet {run.fleet.cluster}: group(s) {', '.join(failed)} failed their verify "
                "(their lines above)")
    return EXIT_STEP_FAILED if failed or problems else EXIT_OK


def _router_problems(router: FleetRouter, admin: str) -> list[str]:
    """What keeps the router from being the fleet's endpoint: not running, or a group it does
    not hold or report ready (each with the fix)."""
    where = router.where
    try:
        found = router.host.look()
        if not (found.container and found.container.running):
            return [f"{where}: not running; `k3deploy up -i {router.fleet.source}` starts it"]
        workers = router.host.workers(admin)
    except K3Error as err:
        return [f"{where}: {err.lines()[0]}"]
    names = [g.name for g in router.groups]
    waiting = reg.not_ready(workers, router.groups, set(names))
    return [f"{where}: group {name} is not registered or not ready; `k3deploy up -i "
            f"{router.fleet.source}` registers it (a `watch` tick does too, once it serves)"
            for name in waiting]

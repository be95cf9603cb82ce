"""The router's part of `up` and `down` on a fleet: start it when it is not running, make its
worker list the verified groups (router_reconcile's diff, router_admin's calls), wait for the
router to report them ready, chat through it; and on `down` take each group out, then stop it.

Every call goes over one SSH connection to the router's node (its programs call the router on
that node's loopback); a no-op `up` costs one look and one admin call there, plus the chat.
"""

from __future__ import annotations

import time
from types import TracebackType

from k3deploy.cluster import fleet_registry as reg
from k3deploy.cluster import router_service as svc
from k3deploy.cluster.fleet import Fleet
from k3deploy.core import interrupt
from k3deploy.core.errors import StepFailed
from k3deploy.core.jsonvalue import JSON
from k3deploy.node.fleet_keys import FleetKeys
from k3deploy.node.router_host import STEP, RouterHost, files_sha
from k3deploy.node.session import endpoint_for
from k3deploy.node.transport import NodeConnection
from k3deploy.remote.router_reconcile import Worker
from k3deploy.steps.engine.verify import reasoning_field

LIVE_WITHIN = 60.0       # SMG answers its admin API within seconds of its start
# Registration is a background job (the router reads the worker's /health, /server_info,
# /model_info first), then --health-success-threshold (2) checks one interval apart.
READY_CHECKS = 4
READY_FLOOR = 60.0


class FleetRouter:
    def __init__(self, fleet: Fleet, keys: FleetKeys, accept_new_host_keys: bool = False):
        inv = svc.host_inventory(fleet)
        self.fleet, self.keys = fleet, keys
        self.conn = NodeConnection(endpoint_for(inv, fleet.router_node()),
                                   accept_new_host_keys=accept_new_host_keys)
        self.host = RouterHost(self.conn, fleet.router, inv.paths.work)
        self.groups = [reg.GroupEndpoint(g.name, svc.worker_url(g.inventory)) for g in fleet.groups]
        self.args_doc = svc.args_document(svc.smg_argv(fleet.router, keys.serving, keys.admin))

    def __enter__(self) -> FleetRouter:
        return self

    def __exit__(self, _kind: type[BaseException] | None, _err: BaseException | None,
                 _tb: TracebackType | None) -> None:
        self.conn.close()

    @property
    def where(self) -> str:
        return f"router on {self.host.node} ({svc.client_url(self.fleet)})"

    # -- up ---------------------------------------------------------------------------------
    def ensure_running(self, check: bool = False) -> list[str]:
        found = self.host.look()
        if found.serving(files_sha(self.args_doc)):
            return [f"{self.where}: running"]
        why = ("not running" if not (found.container and found.container.running)
               else "its settings changed")
        if check:
            return [f"{self.where}: {why}; would start it"]
        self.host.start(self.args_doc)
        self._wait_live()
        return [f"{self.where}: {why}; started"]

    def _wait_live(self) -> list[Worker]:
        """Its worker list once its admin API answers: just started by us, or by docker's
        restart policy after its process died (running again, not answering yet)."""
        deadline = time.monotonic() + LIVE_WITHIN
        while True:
            try:
                return self.host.workers(self.keys.admin)
            except StepFailed as err:
                if time.monotonic() > deadline:
                    raise StepFailed(self.host.node, f"the router did not answer within "
                                     f"{LIVE_WITHIN:.0f}s of its start: {err}", step=STEP,
                                     hint=f"`docker logs {svc.CONTAINER}` on {self.host.node}") \
                        from None
            interrupt.sleep(1.0)

    def reconcile(self, verified: set[str], check: bool = False) -> list[str]:
        """Register the verified groups, remove every other entry; what it did, by group."""
        workers = self._wait_live()
        p = reg.register_plan(workers, self.groups, verified, self.keys.serving)
        if reg.is_noop(p):
            return [f"{self.where}: its workers are the verified groups already "
                    f"({', '.join(sorted(verified)) or 'none'}); nothing to change"]
        lines = reg.plan_lines(p, self.groups, workers)
        if check:
            return [f"would {line.removeprefix('router: ')}" for line in lines]
        serving: list[JSON] = [{"url": s.url, "api_key": s.api_key}
                               for s in reg.wanted(self.groups, verified, self.keys.serving)]
        self.host.admin(self.keys.admin, "reconcile", serving=serving)
        return lines

    def wait_ready(self, verified: set[str]) -> None:
        within = max(READY_FLOOR, READY_CHECKS * self.fleet.router.health_check_interval)
        deadline = time.monotonic() + within
        while waiting := reg.not_ready(self.host.workers(self.keys.admin), self.groups, verified):
            if time.monotonic() > deadline:
                raise StepFailed(self.host.node, f"the router does not report group(s) "
                                 f"{', '.join(waiting)} ready {within:.0f}s after their "
                                 "registration", step=STEP,
                                 hint=f"`docker logs {svc.CONTAINER}` on {self.host.node} says "
                                 "why (the router reads each group's /health and /server_info "
                                 "with the fleet's key)")
            interrupt.sleep(1.0)

    def verify(self) -> str:
        """A chat completion through the router, with the chain of thought in its place."""
        model = self.fleet.groups[0].inventory.model.repo
        chat = self.host.chat(self.keys.serving, model).chat
        message = chat.message if chat else None
        if chat is None or chat.status != 200 or message is None:
            raise StepFailed(self.host.node, "a chat completion through the router answered "
                             f"{chat.shown() if chat else 'nothing'}", step=STEP,
                             hint=f"`docker logs {svc.CONTAINER}` on {self.host.node}")
        if not message.content or not reasoning_field(message):
            raise StepFailed(self.host.node, "a chat through the router came back without "
                             "reasoning_content", step=STEP,
                             hint="every group's verify passed: compare the groups' engine flags")
        return f"{self.where}: a chat completion through it answered, with reasoning_content"

    # -- down -------------------------------------------------------------------------------
    def deregister(self, group: reg.GroupEndpoint, check: bool = False) -> list[str]:
        ids = reg.deregister_ids(self.host.workers(self.keys.admin), group)
        if check:
            return [f"would remove group {group.name} from the router" for _ in ids[:1]]
        for wid in ids:
            self.host.admin(self.keys.admin, "remove", worker_id=wid)
        return [f"router: removed group {group.name} ({group.url})" for _ in ids[:1]]

    def stop(self, check: bool = False) -> str:
        if check:
            return f"would stop the {self.where}"
        return f"{self.where}: " + ("stopped" if self.host.stop() else "was not running")

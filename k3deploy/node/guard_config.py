"""What the serve-time guard is told, where its files live on a node, and the cluster's guard
secret (random per cluster, 0600 on the laptop; it reaches the nodes through SSH stdin).

The config is a pure function of the inventory; its digest (config + the node-side scripts +
the secret) tells a running guard that is still right from one that must be replaced.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from k3deploy.cluster import router_service as svc
from k3deploy.cluster.fleet import Fleet
from k3deploy.cluster.inventory import Inventory
from k3deploy.core.jsonvalue import JSON
from k3deploy.engines import spec_from_inventory
from k3deploy.remote import script_text
from k3deploy.remote.protocol import WorkPaths
from k3deploy.node.secretfile import cluster_secret

SCRIPTS = ("guard.py", "guard_http.py", "guard_record.py", "guard_progress.py", "guard_wedge.py",
           "docker_inspect.py")
# a fleet's groups only: the guard takes its group out of the router first (guard_router.py)
ROUTER_SCRIPTS = ("guard_router.py", "router_admin.py", "router_reconcile.py")


def guard_dir(inv: Inventory) -> str:
    return WorkPaths(inv.paths.work).guard


@dataclass(frozen=True)
class GuardPaths:
    """The guard's files on a node: all in one 0700 dir under the work dir."""
    dir: str

    @property
    def script(self) -> str:
        return f"{self.dir}/guard.py"

    @property
    def config(self) -> str:
        return f"{self.dir}/config.json"

    @property
    def secret(self) -> str:
        return f"{self.dir}/secret"

    @property
    def state(self) -> str:
        return f"{self.dir}/state.json"      # remote/guard.py write_state

    @property
    def incident(self) -> str:
        return f"{self.dir}/incident.json"   # remote/guard.py fire

    @property
    def log(self) -> str:
        return f"{self.dir}/guard.log"

    @property
    def router_key(self) -> str:
        return f"{self.dir}/router-admin-key"   # a fleet's groups only, 0600

    @property
    def archive(self) -> str:
        return f"{self.dir}/incidents"       # incidents moved away once the cluster serves again


def node_paths(inv: Inventory) -> GuardPaths:
    return GuardPaths(guard_dir(inv))


@dataclass(frozen=True)
class RouterLink:
    """A fleet's group's way to its router, handed to the guard step by the fleet's run (the
    run option ROUTER_OPTION): the admin API on the private network, the group's worker URL
    there, and the admin key (kept out of repr: never in a log)."""
    base: str
    worker: str
    admin_key: str = field(repr=False)


ROUTER_OPTION = "router"


def router_link(fleet: Fleet, group: str, admin_key: str) -> RouterLink:
    """Where a fleet's group's guards reach the router: its node's private address (SMG binds
    every address, cluster/router_service.py smg_argv), and the URL `up` registered the group by."""
    inv = next(g.inventory for g in fleet.groups if g.name == group)
    return RouterLink(f"http://{fleet.router_node().self_ip}:{fleet.router.port}",
                      svc.worker_url(inv), admin_key)


def scripts(cfg: dict[str, JSON]) -> tuple[str, ...]:
    """The node-side files a guard with this config needs."""
    return SCRIPTS + (ROUTER_SCRIPTS if cfg.get("router") else ())


def load_or_create_secret(state_dir: Path, create: bool = True) -> str | None:
    """The guards sign their requests to each other with it."""
    return cluster_secret(state_dir, "guard-secret", create)


def config(inv: Inventory, node_name: str, link: RouterLink | None = None) -> dict[str, JSON]:
    """The guard's config for one node, without its digest (the guard reads it as
    remote/guard_record.py Config: a key changed here changes there). `link`: a fleet's group
    (a one-group inventory's config has no `router`)."""
    paths, rank = node_paths(inv), inv.rank_of(node_name)
    me = inv.node(node_name)
    fleet: dict[str, JSON] = {} if link is None else {
        "router": {"base": link.base, "worker": link.worker, "key_file": paths.router_key}}
    return {**fleet, "cluster": inv.cluster, "node": node_name, "rank": rank,
            "container": inv.engine.container, "bind": me.self_ip, "port": inv.ports.guard,
            "peers": [{"node": n.name, "rank": r, "address": n.self_ip}
                      for r, n in inv.ranked() if n.name != node_name],
            "peer_timeout": inv.guard.peer_timeout, "poll": inv.guard.poll_seconds,
            "stop_grace": inv.guard.stop_grace, "wedge_seconds": inv.guard.wedge_seconds,
            "serve_port": inv.ports.serve if rank == 0 else None,
            "metrics_port": inv.ports.serve if rank == 0 or
            spec_from_inventory.metrics_on_every_rank(inv) else None,
            "probe": probe_config(inv) if rank == 0 else None,
            "dir": paths.dir, "secret_file": paths.secret,
            "secrets_dir": spec_from_inventory.secrets_dir(inv)}


def probe_config(inv: Inventory) -> dict[str, JSON]:
    """The head guard's 1-token request while the endpoint is idle: often enough that a wedge
    of an idle group is seen within a quarter of wedge_seconds more, at most every 2 s."""
    every = min(15.0, max(2.0, inv.guard.wedge_seconds / 4))
    return {"port": inv.ports.serve, "model": inv.model.repo, "every": every,
            "key_file": spec_from_inventory.api_key_file(inv)}


def with_digest(cfg: dict[str, JSON], secret: str, link: RouterLink | None = None) -> dict[str, JSON]:
    """`link`: its admin key counts too (a new key replaces the guards that hold the old)."""
    blob = (json.dumps(cfg, sort_keys=True) + "".join(script_text(s) for s in scripts(cfg))
            + secret + (link.admin_key if link else ""))
    return {**cfg, "digest": hashlib.sha256(blob.encode()).hexdigest()[:16]}

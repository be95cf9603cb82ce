"""A fleet's endpoint for `chat` and `bench`: the router (its client URL, the fleet's one serving
key), or one group's own head when the user points at it (`--group NAME`: the same key, which
every group's key file holds; node/fleet_keys.py)."""

from __future__ import annotations

from k3deploy.cluster import router_service as svc
from k3deploy.cluster.fleet import Fleet
from k3deploy.cluster.inventory import Inventory
from k3deploy.core.errors import BadInputError, EndpointError
from k3deploy.core.state import state_dir_for
from k3deploy.node import fleet_keys, http_probe
from k3deploy.serving.openai_client import Target, target


def fleet_target(fleet: Fleet, state_dir: str | None,
                 group: str | None = None) -> tuple[Target, Inventory]:
    """(where to send requests, the inventory they describe: the first group's for the router,
    whose groups share one shape)."""
    if group is not None:
        return _group_target(fleet, group, state_dir)
    first = fleet.groups[0].inventory
    keys = fleet_keys.load_or_create(first, state_dir_for(fleet.source, fleet.cluster, state_dir),
                                     {}, create=False)
    if keys is None or (first.engine.require_api_key and keys.serving is None):
        raise EndpointError(f"no keys for fleet {fleet.cluster} on this laptop",
                            hint=f"k3deploy up -i {fleet.source} creates them")
    return Target(svc.client_url(fleet), keys.serving, first.model.repo, fleet.cluster,
                  fleet.source, _tunnel(fleet)), first


def _group_target(fleet: Fleet, name: str, state_dir: str | None) -> tuple[Target, Inventory]:
    found = [g for g in fleet.groups if g.name == name]
    if not found:
        raise BadInputError(f"fleet {fleet.cluster} has no group {name!r}",
                            hint=f"its groups: {', '.join(g.name for g in fleet.groups)}")
    inv = found[0].inventory
    return target(inv, state_dir), inv


def _tunnel(fleet: Fleet) -> str | None:
    """The router behind an SSH gateway: `svc.client_url` names its private address."""
    return http_probe.tunnel_hint(svc.host_inventory(fleet), fleet.router_node(),
                                  fleet.router.port, what="the router's node")

"""`status -i FLEET`: the router (its container on its node, its worker list from its admin
API over that node's SSH connection, the admin key on stdin), then each group's one-group
status (status_cmd.collect on the group's Inventory, its own state dir), then one document
(cli/fleet_status_doc.py). Reads only: no lock taken, no key made, nothing started."""

from __future__ import annotations

from typing import cast

from k3deploy.cli import fleet_status_doc as fdoc
from k3deploy.cli import status_cmd
from k3deploy.cli.status_doc import StatusDoc
from k3deploy.cluster import fleet_registry as reg
from k3deploy.cluster import router_service as svc
from k3deploy.cluster.fleet import Fleet
from k3deploy.core import group
from k3deploy.core.errors import K3Error, UnreachableError
from k3deploy.core.jsonvalue import JSON
from k3deploy.core.redact import redact_obj
from k3deploy.core.state import state_dir_for
from k3deploy.facts import docker
from k3deploy.node.fleet_keys import ADMIN_SECRET
from k3deploy.node.router_host import RouterHost
from k3deploy.node.secretfile import cluster_secret
from k3deploy.node.session import endpoint_for
from k3deploy.node.transport import NodeConnection


def look_router(fleet: Fleet, accept_new_host_keys: bool, state_dir: str | None) -> fdoc.RouterLook:
    """Its container, and its worker list when it runs and the fleet's admin key exists. A node
    that does not answer over SSH (or whose host key is not known) is out of reach, as a
    group's node is in status_cmd._live."""
    admin = cluster_secret(state_dir_for(fleet.source, fleet.cluster, state_dir), ADMIN_SECRET,
                           create=False)
    inv = svc.host_inventory(fleet)
    conn = NodeConnection(endpoint_for(inv, fleet.router_node()),
                          accept_new_host_keys=accept_new_host_keys)
    host = RouterHost(conn, fleet.router, inv.paths.work)
    try:
        try:
            container = host.look().container
        except K3Error as err:
            return {"reachable": False, "error": str(err), "container": None, "workers": None}
        look: fdoc.RouterLook = {"reachable": True, "error": None,
                                 "container": docker.summary(container), "workers": None}
        if not (container and container.running):
            return look
        if admin is None:
            return {**look, "error": "no admin key on this machine (the fleet's secrets dir)"}
        try:
            return {**look, "workers": host.workers(admin)}
        except UnreachableError as err:
            return {**look, "reachable": False, "error": str(err)}
        except K3Error as err:   # the admin API refused or did not answer (StepFailed)
            return {**look, "error": str(err)}
    finally:
        conn.close()


def collect(fleet: Fleet, accept_new_host_keys: bool, state_dir: str | None) -> fdoc.FleetStatusDoc:
    groups = [g.name for g in fleet.groups]
    by_name = {g.name: g.inventory for g in fleet.groups}
    looks = group.run_each(lambda g: status_cmd.collect(by_name[g], accept_new_host_keys,
                                                        state_dir), groups).unwrapped()
    router = fdoc.router_doc(fleet.router_node().name, svc.client_url(fleet),
                             [reg.GroupEndpoint(g.name, svc.worker_url(g.inventory))
                              for g in fleet.groups],
                             look_router(fleet, accept_new_host_keys, state_dir))
    docs: dict[str, StatusDoc] = {g: looks[g] for g in groups}   # the fleet's order
    doc = fdoc.document(fleet.cluster, router, docs)
    # the router's part masked as the groups' are (status_cmd._redacted): no key in it, and
    # a secret in an error text would be masked all the same
    doc["router"] = _redacted(doc["router"])
    return doc


def _redacted(router: fdoc.RouterDoc) -> fdoc.RouterDoc:
    # redact_obj copies a JSON document with its strings masked and nothing else changed, and
    # the router's record is one (strings, booleans, None, lists and mappings of them)
    return cast(fdoc.RouterDoc, redact_obj(cast(JSON, router)))

"""The fleet's router (SMG) as a managed service on its node: its flags, its files in the node's
work dir, the `docker run` that starts it, and the URLs it is reached at. Pure: no I/O.

The router's flags carry its keys (SMG reads them from no other place: remote/router_launch.py),
so they go in a 0600 JSON file the launcher reads inside the container, never in argv. The
image runs the launcher with python3 (its ENTRYPOINT is `python3 -m smg.launch_router`,
smg-project/smg@f8daa883 docker/Dockerfile); as root in the container, because the file is
root's own 0600 on the node and the image's USER (smg) could not read it.
"""

from __future__ import annotations

import json

from k3deploy.cluster.fleet import Fleet
from k3deploy.cluster.fleet_router import RouterSpec
from k3deploy.cluster.inventory import Inventory

CONTAINER = "k3-router"
CONF_MOUNT = "/etc/k3deploy/router"        # the node's router dir, read-only in the container
ARGS_FILE, LAUNCHER_FILE = "router.json", "router_launch.py"
ADMIN_KEY_ID = "k3deploy"                  # --control-plane-api-keys id:name:role:key


def router_dir(work: str) -> str:
    """The router's files on its node, under the work dir of the group it runs in."""
    return f"{work.rstrip('/')}/router"


def smg_argv(spec: RouterSpec, api_key: str | None, admin_key: str) -> list[str]:
    """SMG's flags (`smg launch --help`, smg 1.13.0): the client-facing key, which SMG also
    passes through to the workers (so it is every group's engine key), and the admin key that
    alone may change the worker list."""
    argv = ["--host", "0.0.0.0", "--port", str(spec.port),
            "--prometheus-port", str(spec.metrics_port), "--policy", spec.policy,
            "--health-check-interval-secs", str(spec.health_check_interval)]
    if api_key:
        argv += ["--api-key", api_key]
    return argv + ["--control-plane-api-keys", f"{ADMIN_KEY_ID}:k3deploy admin:admin:{admin_key}"]


def args_document(argv: list[str]) -> str:
    """The 0600 file's content (remote/router_launch.py read_argv)."""
    return json.dumps({"argv": argv}, indent=1) + "\n"


def docker_run_argv(spec: RouterSpec, host_dir: str) -> list[str]:
    """The detached container: host networking (it reaches every group's head on the private
    network and serves on its port), restarted by docker if it dies, its keys off argv."""
    return ["docker", "run", "-d", "--name", CONTAINER, "--network", "host",
            "--restart", "unless-stopped", "--user", "0", "--entrypoint", "python3",
            "-v", f"{host_dir}:{CONF_MOUNT}:ro", spec.image,
            f"{CONF_MOUNT}/{LAUNCHER_FILE}", f"{CONF_MOUNT}/{ARGS_FILE}"]


def worker_url(inv: Inventory) -> str:
    """A group as the router registers it: its head's engine on the private network."""
    return f"http://{inv.head.self_ip}:{inv.ports.serve}"


def loopback_base(spec: RouterSpec) -> str:
    """The router as a program on its own node calls it: the admin API and the chat check."""
    return f"http://127.0.0.1:{spec.port}"


def client_url(fleet: Fleet) -> str:
    """The fleet's one endpoint, as the laptop reaches it (the OpenAI base URL)."""
    node = fleet.router_node()
    inv = host_inventory(fleet)
    host = node.self_ip if inv.behind_gateway(node) else node.address
    return f"http://{host}:{fleet.router.port}/v1"


def host_inventory(fleet: Fleet) -> Inventory:
    """The group whose SSH settings and work dir the router's node uses: its own group's, or
    the first group's for an extra node."""
    node = fleet.router_node()
    return next((g.inventory for g in fleet.groups
                 if any(n.name == node.name for n in g.inventory.nodes)),
                fleet.groups[0].inventory)

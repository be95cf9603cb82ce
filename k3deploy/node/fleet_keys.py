"""A fleet's keys on the laptop: ONE serving key for the router and every group, and the
router's admin key. Each kept 0600 under .k3deploy/<fleet cluster>/secrets/, made once.

SMG passes the client's Authorization header through to the worker (tests/testbed/
test_router_smg.py, the passthrough test), so a group with a key of its own refuses every
request the router sends it: each group's key file (where its launch reads the key,
node/apikey.py) holds the fleet's key, written there before the group's bring-up.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from k3deploy.cluster.inventory import Inventory
from k3deploy.core.errors import BadInputError
from k3deploy.node import apikey
from k3deploy.node.secretfile import cluster_secret, read_or_create

ADMIN_SECRET = "router-admin-key"


class FleetKeys(NamedTuple):
    serving: str | None    # None: the inventory asks for no key (engine.require_api_key false)
    admin: str


def load_or_create(first: Inventory, fleet_dir: Path, group_dirs: dict[str, Path],
                   create: bool = True) -> FleetKeys | None:
    """The fleet's keys, each group's key file made to hold the serving one. None when they
    do not exist and `create` is false (`down` of a fleet never brought up). BadInputError
    naming a group whose key differs (an earlier one-group bring-up of it)."""
    admin = cluster_secret(fleet_dir, ADMIN_SECRET, create)
    if admin is None:
        return None
    # engine.api_key_env: every group reads the same variable; otherwise the fleet's own file
    serving = apikey.load_or_create(first, fleet_dir, create)
    if serving and not first.engine.api_key_env:
        for group, state_dir in group_dirs.items():
            _seed(group, apikey.key_path(state_dir), serving, create)
    return FleetKeys(serving, admin)


def _seed(group: str, path: Path, key: str, create: bool) -> None:
    held = read_or_create(path, lambda: key, create)
    if held is not None and held != key:
        raise BadInputError(
            f"group {group} has an API key of its own ({path}); the router passes the "
            "client's key through to the groups, so every group must take the fleet's",
            hint=f"remove {path}, then `k3deploy up` the fleet again: that group's engine is "
                 "relaunched with the fleet's key (or `down` that group first)")

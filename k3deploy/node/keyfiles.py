"""The SSH key files the inventory names must exist before any connection: a missing file
otherwise reads as an unreachable node (Paramiko just fails to authenticate)."""

from __future__ import annotations

import os

from k3deploy.cluster.inventory import Inventory
from k3deploy.core.errors import InventoryError


def missing_key_files(inv: Inventory) -> list[str]:
    """One problem per key field that names a file which is not there, with the path it
    resolved to (relative paths are relative to the inventory file)."""
    fields = [(f"nodes[{i}].key", n.key) for i, n in enumerate(inv.nodes) if n.key]
    if inv.ssh.key and any(not n.key for n in inv.nodes):  # a node without its own key uses it
        fields.insert(0, ("ssh.key", inv.ssh.key))
    problems = []
    for field, value in fields:
        path = inv.resolve_path(value)
        if not os.path.isfile(path):
            what = "is not a file" if os.path.exists(path) else "does not exist"
            problems.append(f"{field}: {path} {what} (the inventory says {value!r}); fix the "
                            "path or create the key")
    return problems


def check_key_files(inv: Inventory) -> None:
    problems = missing_key_files(inv)
    if problems:
        raise InventoryError(inv.source, problems)

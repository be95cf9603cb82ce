"""The endpoint's API key: generated once per cluster, kept 0600 on the laptop.

The guide's `Authorization: Bearer EMPTY` leaves a 32-GPU endpoint open to anyone who finds
the port; k3deploy puts a key on it by default.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from k3deploy.cluster.inventory import Inventory
from k3deploy.core.errors import BadInputError
from k3deploy.core.redact import register
from k3deploy.node.secretfile import read_or_create


def key_path(state_dir: Path) -> Path:
    return state_dir / "secrets" / "api-key"


def load_or_create(inv: Inventory, state_dir: Path, create: bool = True) -> str | None:
    if not inv.engine.require_api_key:
        return None
    if inv.engine.api_key_env:
        key = os.environ.get(inv.engine.api_key_env)
        if not key:
            raise BadInputError(f"engine.api_key_env names {inv.engine.api_key_env}, which is "
                                "not set in this shell", hint=f"export {inv.engine.api_key_env}=...")
        register(key)
        return key
    return read_or_create(key_path(state_dir), lambda: "k3-" + secrets.token_urlsafe(32), create)

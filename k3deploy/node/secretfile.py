"""A per-cluster secret kept 0600 on the laptop under .k3deploy/<cluster>/secrets/."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from k3deploy.core.redact import register


def read_or_create(path: Path, make: Callable[[], str], create: bool = True) -> str | None:
    """The secret in `path`, made with `make()` and written 0600 (O_EXCL) when absent; None
    when absent and not `create`. Registered for redaction either way."""
    if path.exists():
        value = path.read_text().strip()
    elif create:
        value = make()
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another run made it first: use theirs
            return read_or_create(path, make, create=False)
        with os.fdopen(fd, "w") as fh:
            fh.write(value + "\n")
    else:
        return None
    register(value)
    return value


def cluster_secret(state_dir: Path, name: str, create: bool = True) -> str | None:
    """A random per-cluster secret in `secrets/<name>` (made once, 0600, registered for
    redaction): the fan-out's peer secret and the guards' secret. Each has its own value, never
    the HF token, so a leaked one opens nothing else."""
    import secrets
    return read_or_create(state_dir / "secrets" / name, lambda: secrets.token_urlsafe(32), create)


def peer_secret(state_dir: Path, create: bool = True) -> str | None:
    """Every request to a node's peer server carries it."""
    return cluster_secret(state_dir, "peer-secret", create)

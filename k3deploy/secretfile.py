"""A secret kept in a 0600 file on the laptop, made once (the endpoint key, the guard secret)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def read_or_create(path: Path, make: Callable[[], str], create: bool) -> str | None:
    """The file's value; a new one from make() when absent and create; else None."""
    if path.exists():
        return path.read_text().strip()
    if not create:
        return None
    value = make()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(value + "\n")
    return value

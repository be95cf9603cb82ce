"""Node facts as probes: a read-only shell command and the parser of what it prints.

Standard library only and free of the rest of the package but remote/ (a parser a node
program uses too lives there, standard library as well, and is re-exported here), so any
floor can read the typed records; a step turns a `Probe` into its batched fact
(`node/facts.py`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from collections.abc import Callable


@dataclass(frozen=True)
class Probe:
    name: str
    script: str                        # POSIX sh, read-only; may fail (its exit code is kept)
    parse: Callable[[str, int], Any]   # (output, exit code) -> value
    sudo: bool = False

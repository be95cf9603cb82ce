"""Node facts as probes: a read-only shell command and the parser of what it prints, and the
frozen records steps read them as.

Standard library only and free of the rest of the package but remote/ (a parser a node
program uses too lives there, standard library as well, and is re-exported here), so any
floor can read the typed records; a step turns a `Probe` into its batched fact
(`node/facts.py`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Generic, TypeVar

# Covariant (a frozen record whose value only comes out of `parse`): probes of several value
# types make one list[Probe[object]].
T_co = TypeVar("T_co", covariant=True)
R = TypeVar("R")


@dataclass(frozen=True)
class Probe(Generic[T_co]):
    name: str
    script: str                      # POSIX sh, read-only; may fail (its exit code is kept)
    parse: Callable[[str, int], T_co]   # (output, exit code) -> value
    sudo: bool = False


class UnknownFact(TypeError):
    """A probe's value that no field of the step's facts takes: a misspelt probe or field."""


def record(cls: type[R], values: Mapping[str, object], **derived: object) -> R:
    """`cls` (a frozen dataclass, a step's facts) from its probes' parsed values, each into the
    field of the probe's name, and `derived` (what the step computes from them). A value with
    no field is refused, as a missing field without a default is by the constructor."""
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(values) - names)
    if unknown:
        raise UnknownFact(f"{cls.__name__} has no field for {', '.join(unknown)}")
    return cls(**{**values, **derived})

"""What the engine decisions read of an inventory, as Protocols: the Inventory model lives in
cluster/, a floor above engines/ (.importlinter), so engines/ names only the fields it reads."""

from __future__ import annotations

from collections.abc import Mapping, Sized
from typing import Protocol, TypeAlias

# An engine flag's value, as engine.args holds it and the argv builders render it (spec.py
# render_flags): None removes the builder's flag; True is a bare switch.
FlagValue: TypeAlias = str | int | float | bool | None


class EngineChoice(Protocol):
    """cluster/inventory.py EngineSpec, as far as the engine decisions read it."""
    @property
    def kind(self) -> str: ...
    @property
    def image(self) -> str | None: ...
    @property
    def args(self) -> Mapping[str, FlagValue]: ...
    @property
    def mem_fraction_static(self) -> float | None: ...
    @property
    def executor(self) -> str | None: ...


class PathsView(Protocol):
    """cluster/inventory.py Paths: the node's work dir."""
    @property
    def work(self) -> str: ...


class InventoryView(Protocol):
    """cluster/inventory.py Inventory: its engine, how many nodes it has, its paths."""
    @property
    def engine(self) -> EngineChoice: ...
    @property
    def nodes(self) -> Sized: ...
    @property
    def paths(self) -> PathsView: ...

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


# What a launch reads (spec_from_inventory.build): the fields above and these.
class LaunchEngine(EngineChoice, Protocol):
    @property
    def container(self) -> str: ...
    @property
    def env(self) -> Mapping[str, str | int | float]: ...
    @property
    def dist_timeout(self) -> int: ...
    @property
    def context_length(self) -> int | None: ...
    @property
    def fabric(self) -> str: ...


class LaunchPaths(PathsView, Protocol):
    @property
    def hf(self) -> str: ...


class LaunchNode(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def self_ip(self) -> str: ...
    @property
    def nic(self) -> str: ...


class _Model(Protocol):
    @property
    def repo(self) -> str: ...


class _Gpu(Protocol):
    @property
    def count(self) -> int: ...


class _Ports(Protocol):
    @property
    def dist_init(self) -> int: ...
    @property
    def serve(self) -> int: ...
    @property
    def ray(self) -> int: ...


class LaunchView(InventoryView, Protocol):
    @property
    def engine(self) -> LaunchEngine: ...
    @property
    def paths(self) -> LaunchPaths: ...
    @property
    def head(self) -> LaunchNode: ...
    @property
    def model(self) -> _Model: ...
    @property
    def gpu(self) -> _Gpu: ...
    @property
    def ports(self) -> _Ports: ...
    @property
    def moe_runner_backend(self) -> str | None: ...
    @property
    def source(self) -> str: ...

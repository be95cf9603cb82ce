"""What a step sees: the run (cluster-wide, on the laptop) and one node."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Protocol, Unpack

from structlog.typing import FilteringBoundLogger

from k3deploy.core import log as klog
from k3deploy.core.state import NodeState
from k3deploy.facts.download import Progress
from k3deploy.cluster.inventory import Inventory, Node
from k3deploy.node.executor import Executor
from k3deploy.node.run_inputs import RunInputs, Settled
from k3deploy.node.run_ledger import RunLedger
from k3deploy.node.session import Session
from k3deploy.node.transport import NodeConnection


class Ui(Protocol):
    """What steps and the runner tell the user (k3deploy.run.ui.Ui, a floor above)."""

    def say(self, text: str, wrap: bool = True) -> None: ...

    def step_result(self, node: str, step: str | None, status: str, error: list[str],
                    actions: list[str]) -> None: ...

    def download(self, node: str, progress: Progress) -> None: ...


class InputsSettled(RuntimeError):
    """A run input settled after the run started: a step must settle what it needs in its
    prepare (a programming error, never the user's)."""


@dataclass
class RunContext:
    inv: Inventory
    session: Session
    check: bool = False
    options: dict[str, object] = field(default_factory=dict)   # replace, wipe_weights, out_dir
    inputs: RunInputs = field(default_factory=RunInputs)    # settled once, by prepare()
    ui: Ui | None = None              # progress and messages
    executor: Executor = field(default_factory=Executor)   # every SSH call a step asks for
    ledger: RunLedger = field(default_factory=RunLedger)   # what the run did: the runner's
    started: bool = False             # the inputs are frozen from the first look on

    def option(self, key: str, default: object = None) -> object:
        return self.options.get(key, default)

    def settle(self, **values: Unpack[Settled]) -> RunInputs:
        if self.started:
            raise InputsSettled(f"run inputs {sorted(values)} settled after the run started")
        self.inputs = replace(self.inputs, **values, settled=self.inputs.settled | set(values))
        return self.inputs

    def __setattr__(self, name: str, value: object) -> None:   # any field's value: not read
        if name == "inputs" and getattr(self, "started", False):
            raise InputsSettled("the run's inputs are replaced after the run started")
        super().__setattr__(name, value)


@dataclass
class NodeContext:
    run: RunContext
    node: Node
    rank: int

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def inv(self) -> Inventory:
        return self.run.inv

    @property
    def conn(self) -> NodeConnection:
        return self.run.session.conn(self.node.name)

    @property
    def state(self) -> NodeState:
        return self.run.session.states[self.node.name]

    @property
    def is_head(self) -> bool:
        return self.inv.is_head(self.name)

    def log(self, step: str | None = None) -> FilteringBoundLogger:
        return klog.get(node=self.name, step=step)

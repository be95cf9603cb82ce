"""What a step sees: the run (cluster-wide, on the laptop) and one node."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from k3deploy.core import log as klog
from k3deploy.cluster.inventory import Inventory, Node
from k3deploy.node.run_inputs import RunInputs


@dataclass
class RunContext:
    inv: Inventory
    session: Any                      # k3deploy.node.session.Session
    check: bool = False
    options: dict[str, Any] = field(default_factory=dict)   # replace, wipe_weights, out_dir...
    inputs: RunInputs = field(default_factory=RunInputs)    # settled once, by prepare()
    ui: Any = None                    # k3deploy.run.ui.Ui (progress, messages)
    waiter: Any = None                # (step, node, Wait) -> facts: the runner's one poll loop

    def option(self, key: str, default=None):
        return self.options.get(key, default)


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
    def conn(self):
        return self.run.session.conn(self.node.name)

    @property
    def state(self):
        return self.run.session.states[self.node.name]

    @property
    def is_head(self) -> bool:
        return self.inv.is_head(self.name)

    def log(self, step: str | None = None):
        return klog.get(node=self.name, step=step)

"""The step contract: look at a node (facts), yield what is still missing (plan), do it
(apply), then look again: the plan must now be empty, or the step failed.

A step declares what it looks at (`probes`: shell snippets with parsers) and the runner asks
for them, batched with every other step's, in one round trip per node; `observe` turns the
parsed values into the step's `Facts`, a frozen dataclass with a field per probe (and what the
step derives from them). `probes`, `observe` and `plan` are pure: no SSH, no sleep, no polling,
no laptop-side effect; those happen in apply, by the run's executor (node/executor.py).
Waiting is an action too (a `Wait`): the runner polls the step's facts until the plan no
longer asks for it.

`plan` is a pure function of the facts and the context's settled values, so it is unit-tested
with fact fixtures: typed facts in, actions out.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Generic, cast

from pydantic import BaseModel, model_validator
from typing_extensions import TypeVar   # PEP 696 defaults: `Step[Facts]` takes no `with:`

from k3deploy.core.jsonvalue import JSON
from k3deploy.facts import record
from k3deploy.node import facts as F
from k3deploy.node.context import InputsSettled
from k3deploy.node.ssh_types import Result, quote

if TYPE_CHECKING:
    from k3deploy.node.context import NodeContext, RunContext


T = TypeVar("T")
# A fact of any value type: a step's probes are asked together and their values land in its
# Facts record by name, whose fields are typed (`object`: the list mixes value types).
AnyFact = F.Fact[object]


@dataclass(frozen=True)
class Wait:
    """Until the step's plan no longer yields this wait (the runner polls the step's facts).
    `stall`: fail when the step's progress marker has not changed for this long. `cluster`:
    each poll looks at every node of the step, for `Step.check_cluster`."""

    until: str
    poll: float = 1.0
    timeout: float | None = None
    stall: float | None = None
    cluster: bool = False
    hint: str | None = None   # what to do when it times out or stalls


@dataclass(frozen=True)
class Action:
    """One thing to do on a node. `content` (for uploads) and `stdin` may hold secrets: they
    are never printed; only `description` and `argv` are."""

    description: str
    argv: tuple[str, ...] | None = None
    sudo: bool = False
    stdin: str | None = field(default=None, repr=False)
    retry: bool = False
    upload_to: str | None = None
    content: str | None = field(default=None, repr=False)
    mode: int = 0o600
    wait: Wait | None = None  # the runner polls until the plan no longer yields it
    timeout: float | None = None
    # What the step recognises the action by: the run's ledger records each tagged action as
    # it returns, with `note` (what the plan knew that the step reads back later).
    tag: str | None = None
    note: object = None
    on_laptop: bool = False   # writes only on the laptop (saved logs): the node is unchanged
    check: bool = True        # a nonzero exit fails the step

    def waits_for(self, other: Wait) -> bool:
        return self.wait is not None and self.wait.until == other.until

    def shown(self) -> str:
        if self.upload_to:
            return f"{self.description}: write {self.upload_to} (mode {self.mode:o})"
        if self.argv:
            return f"{self.description}: {'sudo ' if self.sudo else ''}{quote(list(self.argv))}"
        return self.description


@dataclass(frozen=True)
class ClusterProbe:
    """A look at a node taken after every node's facts, on every node at once: one that only
    means something so (the port mesh: each node listens while the others connect to it), or
    one the facts say is needed (a layout asked only before a launch). A step's
    `cluster_probes` says what to run (pure); the runner runs every node's at once, a node's
    several in order, before `cluster_problems`, which finds `parse(result)` in the node's
    facts under `key`, or the K3Error that stopped the command there."""

    key: str
    argv: tuple[str, ...]
    parse: Callable[[Result], object]   # the command's result -> the fact (any type: by `key`)
    stdin: str | None = field(default=None, repr=False)
    timeout: float | None = None


def wait(description: str, until: str, *, poll: float = 1.0, timeout: float | None = None,
         stall: float | None = None, cluster: bool = False, hint: str | None = None) -> Action:
    return Action(description, wait=Wait(until, poll=poll, timeout=timeout, stall=stall,
                                         cluster=cluster, hint=hint))


def cmd(description: str, *argv: str, sudo: bool = False, retry: bool = False,
        stdin: str | None = None, timeout: float | None = None) -> Action:
    return Action(description, tuple(str(a) for a in argv), sudo=sudo, retry=retry, stdin=stdin,
                  timeout=timeout)


def upload(description: str, path: str, content: str, mode: int = 0o600,
           sudo: bool = False) -> Action:
    return Action(description, upload_to=path, content=content, mode=mode, sudo=sudo)


def take_uploads(queue: list[Action]) -> list[Action]:
    """Pop the queue's next action; when it is an upload, with the uploads right behind it
    that share its sudo (the run's order kept: nothing else runs between them)."""
    taken = [queue.pop(0)]
    while taken[0].upload_to and queue and queue[0].upload_to and queue[0].sudo == taken[0].sudo:
        taken.append(queue.pop(0))
    return taken


def settled(value: T | None, name: str) -> T:
    """A run input (`run.inputs.<name>`) that the step's prepare settled: None before."""
    if value is None:
        raise InputsSettled(f"the run's {name} is read before a step's prepare settled it")
    return value


@dataclass(frozen=True)
class NoFacts:
    """The facts of a step that looks at nothing."""


class NoParams(BaseModel):
    """The parameters of a step without `with:`: what a playbook gives it is ignored."""

    @model_validator(mode="before")
    @classmethod
    def _ignored(cls, given: object) -> dict[str, str]:   # any YAML value (object): dropped unread
        return {}


FactsT = TypeVar("FactsT", default=NoFacts)
# Covariant: `self.p` is set once, in __init__, so a runner's Step[F, BaseModel] takes any step.
ParamsT_co = TypeVar("ParamsT_co", bound=BaseModel, covariant=True, default=NoParams)


class Step(Generic[FactsT, ParamsT_co]):
    name: ClassVar[str] = "step"
    read_only: ClassVar[bool] = False
    head_first: ClassVar[bool] = False      # launch: head, then the others
    one_by_one: ClassVar[bool] = False      # with head_first: the others one after another
    needs_all_nodes: ClassVar[bool] = False  # refuses to run if any node failed earlier
    runs_after_failures: ClassVar[bool] = False  # teardown: still runs where earlier steps failed
    # Class attributes, set by each step (a ClassVar cannot name the class's type variables).
    Facts: type[FactsT]         # frozen dataclass: a field per probe (and derived)
    Params: type[ParamsT_co]    # pydantic model of the playbook's `with:`
    if not TYPE_CHECKING:   # what a step that names neither gets (checked: Step[NoFacts, NoParams])
        Facts = NoFacts
        Params = NoParams

    def __init__(self, params: dict[str, object] | None = None):
        self.params = params or {}
        # Validated here so a typo in a playbook fails before any node is touched.
        self.p: ParamsT_co = self.Params.model_validate(self.params)

    label_override: str | None = None  # set by the playbook loader when a label repeats

    @property
    def settles(self) -> bool:   # `settle` sees every node's facts before any plan
        return False

    @property
    def label(self) -> str:
        """Unique within a playbook: the column in reports and the key in state files."""
        return self.label_override or self.default_label()

    def default_label(self) -> str:
        return self.name

    # -- hooks -----------------------------------------------------------------------
    def gate(self, run: RunContext) -> None:
        """Once on the laptop before any SSH login: a BadInputError here ends the run (exit 2)
        with no node touched (the Hub's gate refusing the token)."""

    def prepare(self, run: RunContext) -> None:
        """Once on the laptop, before any node is looked at (resolve a revision, make a key)."""

    def probes(self, node: NodeContext) -> list[AnyFact]:
        """What to look at on the node; gathered by the runner, batched with other steps'."""
        return []

    def observe(self, found: F.Found, node: NodeContext) -> FactsT:
        """The step's facts from its probes' parsed values (pure): each value into the `Facts`
        field of its probe's name; a step that derives more overrides this, passing what it
        derives to `record`."""
        return record(self.Facts, found)

    def wait_probes(self, node: NodeContext) -> list[AnyFact]:
        """What a wait's polls look at besides `probes` (a log, for progress and blame; a hold
        that returns when what is awaited ends). Not in the batched look: that only decides
        whether to wait, and a no-op never does. They come first in the batch: its Python
        facts run in order, so the `probes` read what ended a hold."""
        return []

    def facts(self, node: NodeContext, waiting: bool = False) -> FactsT:
        """Look now, in one round trip (the runner's waits and re-checks), by the run's
        executor."""
        # The executor returns this step's `observe` (node/ is a floor below: it cannot name
        # Step, so it says `object`).
        return cast(FactsT, node.run.executor.look(self, node, waiting))

    def plan(self, facts: FactsT, node: NodeContext) -> list[Action]:
        return []

    def problems(self, facts: FactsT, node: NodeContext) -> list[tuple[str, str]]:
        """(check, message) pairs found on this node; a read-only step reports these."""
        return []

    def cluster_probes(self, all_facts: dict[str, FactsT],
                       run: RunContext) -> dict[str, ClusterProbe | tuple[ClusterProbe, ...]]:
        """node -> what to look at on every node at once (several: in that order), decided
        from every node's facts (pure); the runner runs them and adds what they found to the
        facts."""
        return {}

    def cluster_problems(self, all_facts: dict[str, FactsT],
                         run: RunContext) -> list[tuple[str, str, str]]:
        """(node, check, message) found only by comparing nodes (pure)."""
        return []

    def cluster_detail(self, all_facts: dict[str, FactsT], run: RunContext) -> dict[str, JSON] | None:
        """What the step found across nodes, kept in the head's record of the step (pure);
        recorded whether or not it found problems (the fabric mesh's figures)."""
        return None

    def settle(self, all_facts: dict[str, FactsT], run: RunContext) -> object | None:
        """(With `settles`.) Once, before any node's plan: a decision only every node's facts
        together make (pure: no SSH); the runner keeps it in the run's ledger for the plans
        (`run.ledger.decided(type)`)."""
        return None

    def apply(self, node: NodeContext, actions: list[Action]) -> None:
        queue = list(actions)
        while queue:
            self.run_action(node, *take_uploads(queue))

    def recheck(self, node: NodeContext) -> tuple[FactsT, list[str]]:
        """After apply: the facts now (a wait's last look, when nothing ran after it), and
        what the plan still asks for (must be nothing)."""
        last = node.run.executor.last_look(self, node)
        # A wait's last look: the facts the waiter took with this step (`facts`).
        facts = self.facts(node) if last is None else cast(FactsT, last)
        return facts, [a.shown() for a in self.plan(facts, node)]

    def closing_lines(self, run: RunContext, all_facts: dict[str, FactsT]) -> list[str]:
        """Printed once after the step succeeded on every node (e.g. the endpoint URL)."""
        return []

    def detail(self, facts: FactsT, node: NodeContext) -> dict[str, JSON] | None:
        """What to keep in the state file after success."""
        return None

    def inputs(self, node: NodeContext) -> dict[str, object]:
        """What the step's result depends on; hashed as JSON, str() for the rest, so any
        value goes (`object`)."""
        return {"params": self.params}

    def progress(self, facts: FactsT, node: NodeContext) -> object:
        """While waiting: a marker that changes while work advances (bytes done); None when
        the step has none. May raise StepFailed when what is awaited died."""
        return None

    def show_progress(self, facts: FactsT, node: NodeContext) -> None:
        """While waiting: tell the user (progress bar, the engine's last loading line)."""

    def check_cluster(self, all_facts: dict[str, FactsT], run: RunContext, waited: float,
                      looked_at: float) -> None:
        """While a `cluster` wait polls: raise StepFailed (naming the culprit node) for a
        fault only the whole cluster shows (a rank exited, duplicate ranks). `waited`: seconds
        since the wait began; `looked_at`: when (monotonic) this look began, so that a step can
        tell what it did before the look from what it did while the look ran."""

    # -- helpers ---------------------------------------------------------------------
    def inputs_digest(self, node: NodeContext) -> str:
        blob = json.dumps(self.inputs(node), sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def run_action(self, node: NodeContext, action: Action, *more_uploads: Action) -> object:
        """One action, run by the run's executor (node/executor.py); with more_uploads
        (take_uploads' run of uploads), all in one round trip. A wait returns the facts it
        ended on."""
        return node.run.executor.run(self, node, action, *more_uploads)

    def run_command(self, node: NodeContext, action: Action) -> Result:
        # A command (argv, no wait, no upload): the executor returns its connection's Result.
        return cast(Result, self.run_action(node, action))

    def run_wait(self, node: NodeContext, action: Action) -> FactsT:
        # A wait: the waiter returns its last look, taken with this step (run/waiter.py).
        return cast(FactsT, self.run_action(node, action))


# A step as the runner holds it: every step, whatever its facts and `with:`; the runner hands a
# step's facts only back to that same step, so to it they are opaque (`object`).
AnyStep = Step[object, BaseModel]

"""Every SSH call a step's apply makes, and the record of what ran.

Steps plan and decide; the executor runs what they ask for: a command, a run of uploads in one
round trip, a look at the step's facts, or a wait (handed to the runner's one poll loop,
run/waiter.py). Each action that carries a `tag` is recorded in the run's ledger
(node/run_ledger.py) as it returns, so what a step learns from its own actions (when this
run started a downloader, which incident it archived) is read from there, never written by
the step.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypeVar

from k3deploy.node import facts as F

if TYPE_CHECKING:
    from k3deploy.node.run_ledger import RunLedger
    from k3deploy.node.transport import NodeConnection


class RunLike(Protocol):
    @property
    def ledger(self) -> RunLedger: ...


class NodeLike(Protocol):
    """What the executor reads of a node's context (node/context.py NodeContext, which holds
    the executor: importing it here would close a circle)."""
    @property
    def name(self) -> str: ...
    @property
    def conn(self) -> NodeConnection: ...
    @property
    def run(self) -> RunLike: ...


N = TypeVar("N", bound=NodeLike)
N_contra = TypeVar("N_contra", bound=NodeLike, contravariant=True)


class StepLike(Protocol[N_contra]):
    """What the executor reads of a step (steps/base.py Step, a floor above), for nodes N."""
    @property
    def name(self) -> str: ...
    @property
    def label(self) -> str: ...
    def probes(self, node: N_contra) -> list[F.Fact[object]]: ...
    def wait_probes(self, node: N_contra) -> list[F.Fact[object]]: ...
    # object: the step's own Facts type, which this floor cannot name
    def observe(self, found: F.Found, node: N_contra) -> object: ...


class ActionLike(Protocol):
    """What the executor reads of an action (steps/base.py Action)."""
    @property
    def description(self) -> str: ...
    @property
    def argv(self) -> tuple[str, ...] | None: ...
    @property
    def sudo(self) -> bool: ...
    @property
    def stdin(self) -> str | None: ...
    @property
    def retry(self) -> bool: ...
    @property
    def upload_to(self) -> str | None: ...
    @property
    def content(self) -> str | None: ...
    @property
    def mode(self) -> int: ...
    @property
    def wait(self) -> object: ...       # steps/base.py Wait | None: handed to the waiter unread
    @property
    def timeout(self) -> float | None: ...
    @property
    def tag(self) -> str | None: ...
    @property
    def note(self) -> object: ...       # what the plan knew, kept in the ledger unread
    @property
    def check(self) -> bool: ...


def _upload(action: ActionLike) -> tuple[str, str, int]:
    """(content, path, mode) of an upload (take_uploads gives only uploads)."""
    if action.upload_to is None:
        raise RuntimeError(f"{action.description!r} is not an upload")
    return action.content or "", action.upload_to, action.mode


class Executor:
    def __init__(self, waiter: Callable[..., object] | None = None):
        # (step, node, Wait) -> the facts the wait ended on; set by the runner (run/waiter.py),
        # which names the step and wait types a floor below cannot: hence `...` and `object`.
        self.waiter = waiter
        # (step label, node) -> the facts a wait ended on, while nothing has run on the node
        # since: the re-check would see the same, so it takes them (a round trip fewer).
        self._last_look: dict[tuple[str, str], object] = {}
        self._lock = threading.Lock()

    def look(self, step: StepLike[N], node: N, waiting: bool = False) -> object:
        """The step's facts now, in one round trip (`waiting`: with its wait probes first)."""
        found = (step.wait_probes(node) if waiting else []) + step.probes(node)
        return step.observe(F.gather(node.conn, found, step=step.name), node)

    def gather(self, step: StepLike[N], node: N, facts: list[F.Fact[object]]) -> F.Found:
        """These facts now, in one round trip, parsed (a request the step makes itself)."""
        return F.gather(node.conn, facts, step=step.name)

    def run(self, step: StepLike[N], node: N, action: ActionLike,
            *more_uploads: ActionLike) -> object:
        """One action; with more_uploads (take_uploads' run of uploads), all in one round trip.
        A wait returns (and keeps, for `recheck`) the facts it ended on (object: the step's
        Facts), a command its Result, uploads None."""
        key = (step.label, node.name)
        with self._lock:
            self._last_look.pop(key, None)
        result: object
        if action.wait:
            if self.waiter is None:
                raise RuntimeError("a wait outside a runner: nothing polls it")
            result = self.waiter(step, node, action.wait)
            with self._lock:
                self._last_look[key] = result
        elif action.upload_to:
            files = [_upload(a) for a in (action, *more_uploads)]
            node.conn.put_texts(files, sudo=action.sudo, step=step.name)
            result = None
        else:
            if action.argv is None:
                raise RuntimeError(f"{action.description!r} has no command to run")
            result = node.conn.run(list(action.argv), sudo=action.sudo, stdin=action.stdin,
                                   retry=action.retry, timeout=action.timeout, step=step.name,
                                   check=action.check)
        self.done(step, node, action)
        return result

    def done(self, step: StepLike[N], node: N, action: ActionLike,
             result: object = None) -> None:
        """Record a tagged action as returned (a laptop-side one with what it made)."""
        if action.tag:
            node.run.ledger.record(node.name, step.label, action.tag, note=action.note,
                                   result=result)

    def last_look(self, step: StepLike[N], node: N) -> object | None:
        """The facts the step's last wait on the node ended on, if nothing ran since."""
        with self._lock:
            return self._last_look.pop((step.label, node.name), None)

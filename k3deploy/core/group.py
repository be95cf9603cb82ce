"""One call per node, all at once, and what came back: the one place k3deploy fans out.

Modelled on Fabric's `ThreadingGroup` and `GroupResult` (fabric/group.py and
fabric/exceptions.py @2e5dffbc): every call runs to its end in its own thread, and the result
maps each key to the call's return value or to the exception that stopped it, with a `failed`
and a `succeeded` sub-dict, as Fabric's. Where Fabric raises
`GroupException(result)` when any call failed, the callers here choose: `unwrapped()` raises
the first failure in key order (what a loop over a pool's `map` raised), `failed` lets them
report every node. The threads come from remote/thread_pool.py, the one pool.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Generic, TypeVar, overload

from k3deploy.remote.thread_pool import pool

MAX_THREADS = 32  # SSH sessions opened at once; a larger cluster queues behind them
T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")
E = TypeVar("E", bound=BaseException)


class GroupResult(dict[K, V | BaseException], Generic[K, V]):
    """key -> return value, or the BaseException the call raised (in the order given)."""

    @property
    def succeeded(self) -> dict[K, V]:
        return {k: v for k, v in self.items() if not isinstance(v, BaseException)}

    @property
    def failed(self) -> dict[K, BaseException]:
        return {k: v for k, v in self.items() if isinstance(v, BaseException)}

    def value(self, key: K) -> V:
        """The call's return value; its exception is raised here."""
        found = self[key]
        if isinstance(found, BaseException):
            raise found
        return found

    def failures(self, expected: type[E]) -> dict[K, E]:
        """The failures of the kind the caller reports per node; any other is raised (the
        first in key order)."""
        failed: dict[K, E] = {}
        for key, err in self.failed.items():
            if not isinstance(err, expected):
                raise err
            failed[key] = err
        return failed

    def unwrapped(self) -> dict[K, V]:
        """Every return value; the first failure in key order is raised instead."""
        return {key: self.value(key) for key in self}


def _capture(fn: Callable[[T], V], item: T) -> V | BaseException:
    try:
        return fn(item)
    except BaseException as err:  # noqa: B036 - handed to the caller, as Fabric's thread does
        return err


@overload
def run_each(fn: Callable[[T], V], items: Iterable[T]) -> GroupResult[T, V]: ...
@overload
def run_each(fn: Callable[[T], V], items: Iterable[T], key: Callable[[T], K]) -> GroupResult[K, V]: ...
def run_each(fn: Callable[[T], V], items: Iterable[T],
             key: Callable[[T], K] | None = None) -> GroupResult[T, V] | GroupResult[K, V]:
    """fn(item) for every item at once (at most MAX_THREADS threads); keyed by key(item), or
    by the item itself."""
    listed = list(items)
    found: list[V | BaseException] = []
    if listed:
        with pool(min(MAX_THREADS, len(listed)), "group") as threads:
            found = list(threads.map(lambda item: _capture(fn, item), listed))
    if key is None:
        return GroupResult(zip(listed, found))
    return GroupResult(zip(map(key, listed), found))


def run_calls(calls: dict[str, Callable[[], V]]) -> GroupResult[str, V]:
    """Independent calls side by side, keyed by name."""
    return run_each(lambda name: calls[name](), list(calls))

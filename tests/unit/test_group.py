"""core/group.py, the one fan-out: every call runs to its end, results keyed in the order given,
failures per key (Fabric's GroupResult), the first failure in order raised by unwrapped()."""

from __future__ import annotations

import threading

import pytest

from k3deploy.core import group
from k3deploy.core.errors import K3Error


def test_every_call_runs_at_once_and_results_keep_the_order_given():
    barrier = threading.Barrier(5, timeout=30)   # only passes if all five run concurrently

    def call(n):
        barrier.wait()
        return n * n
    result = group.run_each(call, [4, 3, 2, 1, 0], key=lambda n: f"n{n}")
    assert list(result) == ["n4", "n3", "n2", "n1", "n0"]
    assert result.unwrapped() == {"n4": 16, "n3": 9, "n2": 4, "n1": 1, "n0": 0}
    assert result.failed == {}


def test_failures_are_kept_per_key_and_the_others_still_finish():
    done = []

    def call(n):
        if n % 2:
            raise K3Error(f"node{n} failed")
        done.append(n)
        return n
    result = group.run_each(call, range(6), key=lambda n: f"node{n}")
    assert sorted(done) == [0, 2, 4]
    assert {k: v for k, v in result.items() if k not in result.failed} == {"node0": 0, "node2": 2, "node4": 4}
    assert {k: str(v) for k, v in result.failed.items()} == {
        "node1": "node1 failed", "node3": "node3 failed", "node5": "node5 failed"}
    with pytest.raises(K3Error, match="node1 failed"):
        result.unwrapped()
    with pytest.raises(K3Error, match="node3 failed"):
        result.value("node3")
    assert result.value("node4") == 4


def test_base_exceptions_are_handed_back_too():
    result = group.run_each(lambda n: (_ for _ in ()).throw(KeyboardInterrupt()), [1])
    assert isinstance(result.failed[1], KeyboardInterrupt)


def test_nothing_to_run_and_named_calls():
    assert group.run_each(lambda n: n, []) == {}
    found = group.run_calls({"a": lambda: 1, "b": lambda: 2})
    assert found.unwrapped() == {"a": 1, "b": 2}


def test_more_items_than_threads_all_run():
    assert len(group.run_each(lambda n: n, range(group.MAX_THREADS * 2)).unwrapped()) == 64


def test_failures_of_the_expected_kind_are_returned_others_raised():
    def call(n):
        if n == 1:
            raise K3Error("unreachable")
        if n == 2:
            raise ValueError("a bug")
        return n
    assert list(group.run_each(call, [0, 1]).failures(K3Error)) == [1]
    with pytest.raises(ValueError, match="a bug"):
        group.run_each(call, [0, 1, 2]).failures(K3Error)


def test_the_pool_of_threads_lives_in_one_module_shipped_with_the_downloader():
    """Issue 21: `grep -rn ThreadPoolExecutor k3deploy` finds one place. The node programs
    import it by plain name, so it must ship beside them."""
    from pathlib import Path

    from k3deploy.remote import protocol
    package = Path(group.__file__).resolve().parents[1]
    naming = sorted(str(p.relative_to(package)) for p in package.rglob("*.py")
                    if "ThreadPoolExecutor" in p.read_text())
    assert naming == ["remote/thread_pool.py"]
    assert "thread_pool.py" in protocol.DOWNLOADER_FILES


def test_the_fan_outs_threads_are_named_for_a_stack_dump():
    names = group.run_each(lambda _: threading.current_thread().name, [1, 2]).unwrapped()
    assert all(name.startswith("group_") for name in names.values())

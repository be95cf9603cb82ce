"""Are the nodes alike where the inventory does not say what they should be?

The GPU model and count are declared in the inventory, so preflight compares each node with
that declaration (never with a vote: with two nodes a vote ties and blames a healthy node).
The driver and its CUDA version are not declared: a node is named as the odd one only when a
strict majority of the nodes agrees on another value; otherwise every node's value is listed
and no node is blamed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Protocol, TypeVar

V = TypeVar("V")


class Versions(Protocol):
    """What a node runs that the inventory does not declare (preflight's facts, init's hosts);
    None where nvidia-smi failed."""

    @property
    def driver(self) -> str | None: ...
    @property
    def cuda(self) -> str | None: ...


# (how the message names it, the value)
UNDECLARED: tuple[tuple[str, Callable[[Versions], str | None]], ...] = (
    ("driver", lambda v: v.driver), ("CUDA", lambda v: v.cuda))


def majority(values: Mapping[str, V]) -> V | None:
    """The value more than half of the nodes have, or None."""
    value, votes = Counter(values.values()).most_common(1)[0]
    return value if votes * 2 > len(values) else None


def undeclared_problems(all_facts: Mapping[str, Versions]) -> list[tuple[str, str, str]]:
    """(node, "identical", message) rows; node "cluster" when no majority exists."""
    odd: dict[str, list[tuple[str, str, str]]] = {}
    unsettled = []
    for label, read in UNDECLARED:
        # A node whose nvidia-smi failed is reported by the per-node GPU check already.
        values = {n: value for n, f in all_facts.items() if (value := read(f))}
        if len(set(values.values())) <= 1:
            continue
        common = majority(values)
        if common is None:
            unsettled.append(f"{label} " + ", ".join(f"{n} {v}" for n, v in values.items()))
            continue
        for node, value in values.items():
            if value != common:
                odd.setdefault(node, []).append((label, value, common))
    rows = [(n, "identical", _odd_message(odd[n])) for n in all_facts if n in odd]
    if unsettled:
        rows.append(("cluster", "identical", f"the nodes differ ({'; '.join(unsettled)}) and no "
                     "majority says which is right: install one NVIDIA driver on every node "
                     "(the image tag follows its CUDA version), then re-run"))
    return rows


def _odd_message(diffs: list[tuple[str, str, str]]) -> str:
    have = ", ".join(f"{label} {value}" for label, value, _ in diffs)
    others = ", ".join(f"{label} {common}" for label, _, common in diffs)
    cuda = next((common for label, _, common in diffs if label == "CUDA"), None)
    # One image for every rank: mixing kimi-k3 and kimi-k3-cu12 builds in one group is untested.
    return (f"{have} differs from the majority's {others}; install the others' driver"
            + (f" (CUDA {cuda})" if cuda else "") + " here: every node must run the same "
            "driver, the image tag follows it (kimi-k3 for CUDA 13, kimi-k3-cu12 for CUDA 12)")

"""Are the nodes alike where the inventory does not say what they should be?

The GPU model and count are declared in the inventory, so preflight compares each node with
that declaration (never with a vote: with two nodes a vote ties and blames a healthy node).
The driver and its CUDA version are not declared: a node is named as the odd one only when a
strict majority of the nodes agrees on another value; otherwise every node's value is listed
and no node is blamed.
"""

from __future__ import annotations

from collections import Counter

UNDECLARED = (("driver", "driver"), ("cuda", "CUDA"))  # (fact, how the message names it)


def majority(values: dict[str, str]) -> str | None:
    """The value more than half of the nodes have, or None."""
    value, votes = Counter(values.values()).most_common(1)[0]
    return value if votes * 2 > len(values) else None


def undeclared_problems(all_facts: dict[str, dict]) -> list[tuple[str, str, str]]:
    """(node, "identical", message) rows; node "cluster" when no majority exists."""
    odd: dict[str, list[tuple[str, str, str]]] = {}
    unsettled = []
    for fact, label in UNDECLARED:
        # A node whose nvidia-smi failed is reported by the per-node GPU check already.
        values = {n: f[fact] for n, f in all_facts.items() if f.get(fact)}
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

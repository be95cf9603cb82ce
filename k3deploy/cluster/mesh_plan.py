"""The pairwise throughput mesh's arithmetic (pure): which nodes pair in which round, and
which links are slow.

Rounds by the circle method: N-1 rounds for an even N (N for an odd N, one node idle in
each), every round a set of disjoint pairs, every pair once. Both directions of a pair are
measured in its round at once, so a round takes one measuring time whatever N is.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

# one node's count as the program prints it (its document type, defined once there)
from k3deploy.remote.fabric_mesh import Found

BITS = 8
GBIT = 1e9


def rounds(names: list[str]) -> list[list[tuple[str, str]]]:
    ring = list(names) + ([None] if len(names) % 2 else [])
    half, out = len(ring) // 2, []
    for _ in range(len(ring) - 1):
        pairs = [(ring[i], ring[-1 - i]) for i in range(half)]
        out.append([(a, b) for a, b in pairs if a is not None and b is not None])
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return out


def partners(names: list[str]) -> dict[str, list[str | None]]:
    """node -> its partner in each round (None: idle that round)."""
    out: dict[str, list[str | None]] = {n: [] for n in names}
    for pairs in rounds(names):
        met = {a: b for a, b in pairs} | {b: a for a, b in pairs}
        for n in names:
            out[n].append(met.get(n))
    return out


@dataclass(frozen=True)
class Link:
    src: str
    dst: str
    gbps: float | None      # None: nothing arrived (the error says why)
    error: str | None = None

    @property
    def name(self) -> str:
        return f"{self.src}->{self.dst}"


def links(found: dict[str, Found], names: list[str]) -> list[Link]:
    """Every directed link of the schedule, from what each receiver counted."""
    out = []
    for pairs in rounds(names):
        for a, b in pairs:
            out += [_link(found, a, b), _link(found, b, a)]
    return out


def _link(found: dict[str, Found], src: str, dst: str) -> Link:
    receiver, sender = found.get(dst), found.get(src)
    got = (receiver["received"] or {}).get(src) if receiver else None
    error = (sender["errors"] or {}).get(dst) if sender else None
    if not got or not got.get("seconds"):
        return Link(src, dst, None, error or f"{dst} received nothing from {src}")
    return Link(src, dst, got["bytes"] * BITS / got["seconds"] / GBIT, error)


@dataclass(frozen=True)
class Verdict:
    median_gbps: float | None   # the median of the nodes' best links: the fabric's own speed
    slow: list[Link]
    nodes: list[str]      # nodes every one of whose links is slow: their own link is


def best_links(found_links: list[Link]) -> dict[str, float]:
    """node -> its fastest measured link, either direction (a node nothing reached: absent)."""
    best: dict[str, float] = {}
    for lk in found_links:
        if lk.gbps is not None:
            for n in (lk.src, lk.dst):
                best[n] = max(best.get(n, 0.0), lk.gbps)
    return best


def judge(found_links: list[Link], min_gbps: float | None = None) -> Verdict:
    """A link is slow under half the median of the nodes' best links, or under min_gbps.

    Each node's best link says what its NIC and switch port can carry; their median is what
    the fabric carries, and stays so while fewer than half the nodes are slow, however many
    links those nodes' ports slow down (the median of all links does not: two slow nodes of
    four slow ten links of twelve)."""
    best = list(best_links(found_links).values())
    median = statistics.median(best) if best else None
    floor = max(median / 2 if median else 0.0, min_gbps or 0.0)
    slow = [lk for lk in found_links if lk.gbps is None or lk.gbps < floor]
    ends = {n for lk in found_links for n in (lk.src, lk.dst)}
    nodes = sorted(n for n in ends
                   if all(lk in slow for lk in found_links if n in (lk.src, lk.dst)))
    return Verdict(median, slow, nodes)

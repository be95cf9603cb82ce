"""Each rank's start-up as its own motion: its engine processes' CPU time and bytes read
(facts/engine_usage.py), its last log line, its GPU memory in use.

During a weight load the CPU time and the reads are all there is to see: the model is built on
the GPU before the first shard is opened (so the memory stands still), the bar reaches
`docker logs` only when it closes, the other ranks print nothing (facts/engine_usage.py). A
rank in its load whose processes neither run nor read is stuck (stopped, or blocked on a hung
disk or network filesystem): the wait names it after `stall_seconds`, however long the other
ranks' loads take. Pure: looks in, judgements and a line for the user out."""

from __future__ import annotations

from dataclasses import dataclass

from k3deploy.engines import startup_log
from k3deploy.facts.engine_usage import EngineUsage

VIEW_EVERY_MAX = 60.0   # seconds between two lines showing the load; less when stall is short


@dataclass
class RankMotion:
    usage: EngineUsage | None = None
    line: str = ""
    memory: int | None = None
    moved_at: float = 0.0
    moves: int = 0
    loading: bool = False
    counted: bool = False          # its counters were read at least once in its load
    shown: tuple[float, float, int] | None = None   # (time, CPU s, bytes) at the last view


class LoadWatch:
    def __init__(self) -> None:
        self.ranks: dict[str, RankMotion] = {}
        self._view: str | None = None
        self._view_at: float | None = None

    def note(self, node: str, usage: EngineUsage | None, line: str, memory: int | None,
             log: str, looked_at: float) -> None:
        """One look at one rank: anything of it that moved since the last look is a move."""
        rank = self.ranks.setdefault(node, RankMotion(moved_at=looked_at))
        moved = (line != rank.line or
                 (usage is not None and usage.moved_since(rank.usage)) or
                 (memory is not None and memory != rank.memory))
        if moved:
            rank.moved_at, rank.moves = looked_at, rank.moves + 1
        loading = startup_log.in_weight_load(log)
        if loading is not None and loading != rank.loading:
            rank.loading, rank.counted, rank.moved_at = loading, False, looked_at
        rank.counted = rank.counted or (rank.loading and usage is not None)
        rank.line = line
        rank.usage = usage if usage is not None else rank.usage
        rank.memory = memory if memory is not None else rank.memory

    def moves(self, nodes: list[str]) -> tuple[int, ...]:
        return tuple(self.ranks[n].moves if n in self.ranks else 0 for n in nodes)

    def stuck(self, nodes: list[str], stall: float, looked_at: float) -> list[tuple[str, float]]:
        """(node, seconds still) of every rank in its weight load whose processes used no CPU
        and read nothing (nor logged, nor changed GPU memory) for longer than `stall`. A rank
        whose counters could never be read is not judged here (the cluster-wide stall is)."""
        return [(n, looked_at - r.moved_at) for n in nodes if (r := self.ranks.get(n))
                and r.loading and r.counted and looked_at - r.moved_at > stall]

    def view(self, labels: dict[str, str], looked_at: float, stall: float) -> str | None:
        """Each rank's bytes read and CPU busy since the last view, at most every
        min(VIEW_EVERY_MAX, stall / 5) seconds; None before any rank's counters were read."""
        every = min(VIEW_EVERY_MAX, stall / 5)
        if self._view_at is not None and looked_at - self._view_at < every:
            return self._view
        if not any(r.usage for r in self.ranks.values()):
            return None
        parts = [f"{label} {self._rank_view(self.ranks.get(n), looked_at)}"
                 for n, label in labels.items()]
        self._view, self._view_at = "engine processes: " + "; ".join(parts), looked_at
        return self._view

    @staticmethod
    def _rank_view(rank: RankMotion | None, looked_at: float) -> str:
        if rank is None or rank.usage is None:
            return "?"
        cpu, read = rank.usage.cpu_seconds, rank.usage.bytes_read
        text = f"read {read / 1e9:.2f} GB" if read >= 1e8 else f"read {read / 1e6:.1f} MB"
        if rank.shown and looked_at > rank.shown[0]:
            span = looked_at - rank.shown[0]
            rate = max(read - rank.shown[2], 0) / span
            busy = max(cpu - rank.shown[1], 0) / span
            text += f" ({rate / 1e6:.{1 if rate < 1e7 else 0}f} MB/s), " \
                f"CPU {busy:.2f} cores busy"
        rank.shown = (looked_at, cpu, read)
        return text

"""wait: until rank 0 answers healthy. Fails fast when any rank's container exits, and when
the process group cannot form, instead of sitting at the barrier until --dist-timeout.

Judged by progress, not by a clock a healthy load outlives (96 shards take ~25-30 min to
load, then CUDA-graph capture and warm-up take minutes): the group formed once rank 0's log
shows it past torch distributed init (a newline-ended line; the loading bar reaches `docker
logs` only when the load is done, engines/startup_log.py), its loading bar, or rank 0's HTTP
server answers at all (it starts only after every scheduler reported ready). The form timeout
bounds silence: nothing moved on any rank for that long.
From then on the wait fails when nothing moved for `stall_seconds`: rank 0's progress line (a
loading bar, a start-up milestone), and on every rank its engine processes' CPU time and bytes
read, its last log line, its GPU memory in use (load_watch.py). Through a weight load only the
CPU time and the reads move (the model is built on the GPU before the first shard is read;
only global rank 0 prints the bar, sglang weight_utils.py enable_tqdm, and `docker logs` shows
it when it closes): a rank in its load whose processes use no CPU and read nothing for
`stall_seconds` is stuck and named, whatever the other ranks do."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from k3deploy.core.errors import StepFailed
from k3deploy.engines import startup_log
from k3deploy.facts import engine_usage, http
from k3deploy.facts.docker import Container
from k3deploy.facts.engine_usage import EngineUsage
from k3deploy.facts.nvidia_smi import Gpu
from k3deploy.facts.ray import RayStatus
from k3deploy.node import facts as F
from k3deploy.node import http_probe, run_settle
from k3deploy.node.context import NodeContext, RunContext
from k3deploy.steps import probes
from k3deploy.steps.engine import raylayout
from k3deploy.steps.engine.load_watch import LoadWatch
from k3deploy.steps.base import Action, AnyFact, Step, wait


@dataclass(frozen=True)
class WaitFacts:
    """A rank's engine container; on the head its /health (and `ray status` over Ray); while
    the wait looks, its log and GPUs."""

    container: Container | None
    health: http.Endpoint | None = None    # the head only
    ray: RayStatus | None = None           # the head over Ray only
    log: str | None = None                 # wait_probes: only while the wait looks
    gpus: tuple[Gpu, ...] | None = None    # wait_probes
    usage: EngineUsage | None = None       # wait_probes: its processes' CPU time, bytes read

    @property
    def healthy(self) -> bool:
        return http_probe.healthy(self.health)

    @property
    def answers(self) -> bool:
        return http_probe.answered(self.health)

    @property
    def gpu_used_mib(self) -> int | None:
        return sum(g.used_mib for g in self.gpus) if self.gpus else None


class WaitParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    timeout: float | None = Field(default=None, gt=0)  # an overall cap; none by default
    form_timeout: float = Field(default=900, gt=0)     # not past distributed init by then: no group
    # Formed, then nothing moved on any rank for this long (no line, no CPU time, no byte
    # read), or a rank in its weight load stood still that long: stuck. A load that runs is
    # never cut off, however long (K3: ~1800 s on 4x4 GB200, sgl-project/sglang#39568).
    stall_seconds: float = Field(default=1800, gt=0)
    poll_seconds: float = Field(default=2.0, gt=0)


def rank_problem(cmds: dict[str, list[str]],
                 expected: dict[str, int]) -> tuple[str, list[str]] | None:
    """Duplicate or missing --node-rank across the running containers: the group never forms.
    Returns the message and the nodes whose container runs another rank than the inventory
    gives them (started by hand, or from another inventory)."""
    running = {n: rank for n, rank in ((n, probes.node_rank_arg(c)) for n, c in cmds.items())
               if rank is not None}
    ranks: dict[str, list[str]] = {}
    for node, rank in running.items():
        ranks.setdefault(rank, []).append(node)
    dups = {r: n for r, n in ranks.items() if len(n) > 1}
    missing = sorted(set(map(str, expected.values())) - set(ranks)) if running else []
    if not dups and not missing:
        return None
    stray = [n for n, r in running.items() if r != str(expected[n])]
    parts = [f"{n} runs --node-rank {running[n]}, the inventory gives it rank {expected[n]}"
             for n in stray]
    parts += [f"rank {r} on {' and '.join(n)}" for r, n in dups.items()]
    parts += [f"rank {r} on no node" for r in missing]
    return "the process group can never form: " + "; ".join(parts), stray


def _finished_key(state: Container | None) -> str:
    """Docker's FinishedAt (RFC 3339, trailing zeros of the nanoseconds trimmed) as a string
    that sorts by time; a missing container sorts first."""
    if not state:
        return ""
    base, _, frac = state.finished.rstrip("Z").partition(".")
    return f"{base}.{frac.ljust(9, '0')}"


class WaitHealthy(Step[WaitFacts, WaitParams]):
    name = "wait"
    Facts = WaitFacts
    Params = WaitParams
    needs_all_nodes = True

    def prepare(self, run: RunContext) -> None:
        run_settle.api_key(run)
        self._formed, self._moved_at = False, 0.0
        self._shown: str | None = None
        self._marker: str | None = None
        self._signals: tuple[str | None, tuple[int, ...]] | None = None
        self._view: str | None = None
        self._shown_view: str | None = None
        self._lines: dict[str, str] = {}
        self._watch = LoadWatch()

    def probes(self, node: NodeContext) -> list[AnyFact]:
        name = node.inv.engine.container
        found: list[AnyFact] = [probes.engine_container(node.inv)]
        if not node.is_head:
            return found
        found.append(http_probe.fact("health", node.inv, ["health"], node.run.inputs.api_key))
        if raylayout.in_use(node.inv):
            found.append(raylayout.status_fact(name))
        return found

    def wait_probes(self, node: NodeContext) -> list[AnyFact]:
        # Each rank's log: the loading progress, and why a rank that exited did so; its GPUs'
        # memory in use; its engine processes' CPU time and reads, all a load shows.
        return [probes.engine_log(node.inv, node.is_head, tail=30), probes.gpus(),
                F.from_probe(engine_usage.usage_probe(node.inv.engine.container))]

    def plan(self, facts: WaitFacts, node: NodeContext) -> list[Action]:
        state = facts.container
        if not state:
            raise StepFailed(node.name, "no engine container; run launch first", step=self.name)
        if node.is_head and not facts.healthy:
            # Also when rank 0 itself exited: the wait's first poll looks at every rank and
            # blames the one that exited first (ranks abort when a peer dies), with its log.
            return [wait("wait until rank 0 answers /health", "rank 0 answers /health",
                         poll=self.p.poll_seconds, cluster=True, timeout=self.p.timeout,
                         stall=self.p.stall_seconds, hint=_stall_hint(node))]
        if not state.running:
            raise StepFailed(node.name, f"rank {node.rank} container exited ({state.exit_code})",
                             step=self.name, hint=f"`k3deploy logs -i {node.inv.source}` shows "
                             "why; fix it, then re-run `k3deploy up` (exited containers are "
                             "replaced)")
        return []

    def check_cluster(self, all_facts: dict[str, WaitFacts], run: RunContext, waited: float,
                      looked_at: float) -> None:
        """Fails fast: a rank's container exited, the ranks cannot form one group, or rank 0
        did not get past torch distributed init in time; instead of sitting out the timeout."""
        states = {n: f.container for n, f in all_facts.items()}
        gone = [n for n, state in states.items() if not state or not state.running]
        if gone:
            raise _exited(run, gone, all_facts)
        _check_ranks(run, {n: state for n, state in states.items() if state})   # every one
        head = all_facts[run.inv.head.name]
        self._note_signals(all_facts, run, looked_at)
        self._formed = self._formed or formed(head)
        if self._formed:
            _check_loads(run, self._watch, self.p.stall_seconds, looked_at)
        if raylayout.in_use(run.inv):
            # Its ranks being placed on every node (Ray holds the GPUs) is the sign the
            # group formed, and losing them without answering means the serve exited.
            image = head.container.image if head.container else None
            self._formed = raylayout.serve_alive(head.ray, head.healthy, run.inv,
                                                 head.log or "", image) or self._formed
        if not self._formed and looked_at - self._moved_at > self.p.form_timeout:
            raise StepFailed(run.inv.head.name, "the process group did not form within "
                             f"{self.p.form_timeout:.0f}s (rank 0 never got past torch "
                             "distributed init)",
                             step=self.name, hint="check that every node reaches "
                             f"{run.inv.head.self_ip}:{run.inv.ports.dist_init} and the "
                             "ranks are 0..N-1 (k3deploy check)")

    def _note_signals(self, all_facts: dict[str, WaitFacts], run: RunContext,
                      looked_at: float) -> None:
        """What shows the start-up moving on any rank: rank 0's last progress line, and each
        rank's motion (load_watch.py: CPU time, bytes read, last log line, GPU memory). Any
        of them changing is progress."""
        head = all_facts[run.inv.head.name]
        self._marker = startup_log.progress_marker(head.log or "") or self._marker
        for n in run.inv.nodes:   # a line pushed out of the tail by /health polls is no news
            facts = all_facts[n.name]
            self._lines[n.name] = _last_line(facts.log or "") or self._lines.get(n.name, "")
            self._watch.note(n.name, facts.usage, self._lines[n.name], facts.gpu_used_mib,
                             facts.log or "", looked_at)
        names = [n.name for n in run.inv.nodes]
        signals = (self._marker, self._watch.moves(names))
        if signals != self._signals:
            self._signals, self._moved_at = signals, looked_at
        labels = {n.name: f"rank {run.inv.rank_of(n.name)}" for n in run.inv.nodes}
        self._view = self._watch.view(labels, looked_at, self.p.stall_seconds)

    def progress(self, facts: WaitFacts, node: NodeContext) -> object:
        # None until the group formed: the form timeout judges that phase (as silence).
        return self._signals if self._formed else None

    def show_progress(self, facts: WaitFacts, node: NodeContext) -> None:
        line = startup_log.progress_marker(facts.log or "")
        if line and line != self._shown and node.run.ui:
            node.run.ui.say(f"{'':>14}{node.name}: {line[:120]}")
            self._shown = line
        if self._view and self._view != self._shown_view and node.run.ui:
            node.run.ui.say(f"{'':>14}{self._view}")
            self._shown_view = self._view


def _last_line(log: str) -> str:
    lines = [line for line in log.splitlines() if line.strip() and '"GET /health' not in line]
    return lines[-1] if lines else ""


def formed(head: WaitFacts) -> bool:
    """Rank 0 is past torch distributed init, loads weights (its bar, printed by global rank 0
    only), is ready, or its HTTP server answers at all (503 during warm-up): every scheduler
    is past the rendezvous."""
    return startup_log.formed(head.log or "") or head.answers


def _stall_hint(node: NodeContext) -> str:
    return (f"no rank printed a new line, used CPU or read a byte for that long (rank 0 is "
            f"{node.name}); `k3deploy logs -i {node.inv.source}` saves every rank's log (a slow "
            "disk: raise the wait step's stall_seconds)")


def _check_loads(run: RunContext, watch: LoadWatch, stall: float, looked_at: float) -> None:
    """A rank in its weight load whose processes stood still for `stall` seconds: stuck."""
    stuck = watch.stuck([n.name for n in run.inv.nodes], stall, looked_at)
    if not stuck:
        return
    node, still = max(stuck, key=lambda s: s[1])
    name = run.inv.engine.container
    raise StepFailed(node, f"rank {run.inv.rank_of(node)} is stuck in its weight load: its "
                     f"engine processes used no CPU and read nothing for {still:.0f}s "
                     f"(stall_seconds {stall:.0f}), nor logged a line", step="wait",
                     hint=f"on {node}, `docker top {name} -o pid,stat,cmd` shows its "
                     "processes (T: stopped, D: blocked on a disk or network filesystem read); "
                     f"remove the container (`docker rm -f {name}`) and re-run `k3deploy up`")


def _check_ranks(run: RunContext, states: dict[str, Container]) -> None:
    name = run.inv.engine.container
    cmds = {n: list(state.cmd) for n, state in states.items()}
    found = rank_problem(cmds, {n.name: run.inv.rank_of(n.name) for n in run.inv.nodes})
    if found:
        problem, stray = found
        removes = "; ".join(f"on {n}: docker rm -f {name}" for n in stray)
        hint = (f"remove the stray container ({removes}), then re-run `k3deploy up`"
                if stray else "fix nodes[].rank, then k3deploy up --replace")
        raise StepFailed(stray[0] if stray else run.inv.head.name, problem, step="wait",
                         hint=hint)


def _exited(run: RunContext, gone: list[str], all_facts: dict[str, WaitFacts]) -> StepFailed:
    # One rank dying makes the others abort (NCCL): the first to exit is the cause.
    states = {n: f.container for n, f in all_facts.items()}
    first = min(gone, key=lambda n: _finished_key(states[n]))
    log, state = all_facts[first].log or "", states[first]
    tail = "\n".join(log.splitlines()[-15:])
    what = f"container exited ({state.exit_code})" if state else "container is gone"
    said = startup_log.error_line(log)
    after = [n for n in gone if n != first]
    also = f" ({', '.join(after)} exited after it: ranks abort when a peer dies)" if after else ""
    also += f"; its error: {said}" if said else ""
    return probes.engine_exit(
        first, f"rank {run.inv.rank_of(first)} {what} before the endpoint was up{also}; the end "
        f"of its log:\n{tail}", "wait", log, state.image if state else None,
        f"`k3deploy logs -i {run.inv.source}` saves every rank's log; fix the cause, then "
        "re-run `k3deploy up` (exited containers are replaced)")

"""Cross-node TCP reachability: every node must reach the head's dist-init port and a sample
of ephemeral ports on every other node. One command per node, all at once (remote/portcheck.py
mesh); its temporary listeners exit by themselves. The commands are a cluster probe
(steps/base.py ClusterProbe): decided here from every node's facts, run by the runner, read
back here; no SSH, thread or clock in this module.

Not run while the cluster serves: every rank's engine runs and the head answers /health, so
the ranks reached each other over this network, which is what the probe would find out. A
group that hangs on a partly open range does not answer, and is probed.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Protocol

from k3deploy.node.output_tail import failure_tail
from k3deploy.core.errors import K3Error
from k3deploy.cluster.fanout import peers_enabled
from k3deploy.facts.docker import Container
from k3deploy.facts.http import Endpoint
from k3deploy.facts.reach import Mesh, NotRun, parse_mesh
from k3deploy.node.context import NodeContext, RunContext
from k3deploy.node.ssh_types import Result
from k3deploy.remote import script_text
from k3deploy.steps.engine import raylayout, serves
from k3deploy.steps.base import AnyFact, ClusterProbe

SCRIPT = script_text("portcheck.py")  # on stdin, not in argv (every `ps` on the node shows argv)
MESH_SECONDS = 15  # every node's listeners up, probes answered; a REJECTed port costs this much
SAMPLE = 2
MESH = "mesh"      # the node's facts field for what its mesh command found


TCP_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")


class Found(Protocol):
    """What of a node's facts (preflight's) the mesh reads: `serving_facts`, the TCP tables
    (`ports_in_use`), the Hub client (a node whose facts came back), and the mesh's answer
    (the runner's cluster look puts it in the field MESH)."""

    @property
    def hub_client(self) -> str | None: ...
    @property
    def ports_in_use(self) -> frozenset[int]: ...
    @property
    def container(self) -> Container | None: ...
    @property
    def serving(self) -> Endpoint | None: ...
    @property
    def mesh(self) -> Mesh | NotRun | K3Error | None: ...


def ports_in_use(out: str, code: int) -> frozenset[int]:
    """Local TCP ports of every socket in /proc/net/tcp and tcp6 (the node's network namespace),
    in any state: a port an outgoing connection holds (a guard's poll of its peers) cannot be
    listened on either, and its peers' probes would be refused until the mesh's deadline."""
    ports = set()
    for line in out.splitlines()[1:]:
        parts = line.split()
        if len(parts) > 3 and ":" in parts[1]:
            ports.add(int(parts[1].rsplit(":", 1)[1], 16))
    return frozenset(ports)


def _ports_for(run: RunContext, name: str, head: str, rng: random.Random,
               busy: frozenset[int]) -> list[int]:
    """A port in use is left out: a listener's owner (a running engine's rendezvous, NCCL's
    bootstrap) must not get a stray connection, and it proves little."""
    ports: list[int] = []
    while len(ports) < SAMPLE:
        port = rng.randint(33000, 60000)
        if port not in busy and port not in ports:
            ports.append(port)
    fixed = [run.inv.ports.peer] if peers_enabled(run.inv) else []  # every node fetches from every other
    if name == head:
        # Multi-node vLLM: the workers' `ray start --address` needs the head's Ray GCS port.
        fixed += [run.inv.ports.dist_init] + ([run.inv.ports.ray] if raylayout.in_use(run.inv) else [])
    return ports + [p for p in fixed if p not in busy]


def _mesh_answer(res: Result) -> Mesh | NotRun:
    return parse_mesh(res.stdout) or NotRun(
        res.exit_code, tuple(failure_tail(f"{res.stdout}\n{res.stderr}".strip(), 6)))


def _mesh(run: RunContext, name: str, ports: list[int], targets: list[str]) -> ClusterProbe:
    me = run.inv.node(name).self_ip   # the address the others probe it at
    argv = ("python3", "-", "mesh", str(MESH_SECONDS), me, *map(str, ports), "--", *targets)
    return ClusterProbe(MESH, argv, _mesh_answer, stdin=SCRIPT, timeout=MESH_SECONDS + 60)


def serving_facts(node: NodeContext) -> list[AnyFact]:
    return serves.facts(node.inv, node.is_head, node.run.inputs.api_key)


NOT_PROBED = ("ports and GPU-to-HCA topology: not probed, the cluster serves (its ranks "
              "reached each other); they are probed before the next launch")


def serving(run: RunContext, all_facts: Mapping[str, Found]) -> bool:
    head = all_facts.get(run.inv.head.name)
    return serves.serves(len(run.inv.nodes), [
        serves.engine_running(f.container)
        for f in all_facts.values()], head.serving if head else None)


def mesh_probes(run: RunContext, all_facts: Mapping[str, Found]) -> dict[str, ClusterProbe]:
    """Every node listens and probes every other at once: one command per node, which the
    runner runs on all of them together (pure: the ports come from the run's mesh seed)."""
    names = [n for n, f in all_facts.items() if f.hub_client is not None]
    if len(names) < 2 or serving(run, all_facts):
        return {}
    rng = random.Random(run.inputs.mesh_seed)
    plan = {n: _ports_for(run, n, run.inv.head.name, rng, all_facts[n].ports_in_use)
            for n in names}
    return {n: _mesh(run, n, plan[n], [f"{run.inv.node(m).self_ip}:{p}" for m in names
                                       if m != n for p in plan[m]])
            for n in names}


def reachability_problems(run: RunContext,
                          all_facts: Mapping[str, Found]) -> list[tuple[str, str, str]]:
    """What the mesh found (none when it was not run)."""
    found = {n: f.mesh for n, f in all_facts.items() if f.mesh is not None}
    # a node whose mesh did not run makes every other node's probes of it fail: name it alone
    failed = {n: err for n, err in found.items() if isinstance(err, K3Error)}
    if failed:
        return [(name, "ports", str(err)) for name, err in failed.items()]
    return _report(found, {n: run.inv.node(n).self_ip for n in found})


def _unopened(found: Mapping[str, Mesh], addresses: dict[str, str]) -> set[str]:
    """host:port targets their node could not listen on: a port in the ephemeral range may be
    held by one of the node's own outgoing connections at that moment (a guard's poll). A
    probe of such a port proves nothing either way."""
    return {f"{addresses[n]}:{port.port}" for n, res in found.items()
            for port in res.listeners if port.busy}


def _not_run(how: NotRun) -> str:
    said = " | ".join(how.output) or "no output"
    return f"the port check did not run: python3 exited {how.exit_code}: {said}"


def _report(found: Mapping[str, Mesh | NotRun | K3Error],
            addresses: dict[str, str]) -> list[tuple[str, str, str]]:
    out = [(n, "ports", _not_run(res)) for n, res in found.items() if isinstance(res, NotRun)]
    meshes = {n: res for n, res in found.items() if isinstance(res, Mesh)}
    unopened = _unopened(meshes, addresses)
    for name, res in meshes.items():
        blocked = sorted(f"{p.target} ({p.why_not})" for p in res.probes
                         if not p.reached and p.target not in unopened)
        if blocked:
            out.append((name, "ports", f"cannot reach {', '.join(blocked)}: open the full TCP "
                        "range between the nodes (NCCL/Gloo hang on a partial range)"))
    return out

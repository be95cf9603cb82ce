"""fabric-mesh: the private network's throughput, pair by pair (`check --fabric`, and `up`
after preflight unless `--no-fabric` or the group already runs this configuration).

Disjoint pairs in rounds (cluster/mesh_plan.py), every node's schedule in one command, all
nodes at once (a ClusterProbe: the runner runs them; remote/fabric_mesh.py on the nodes). A
link under half the median of the nodes' best links (mesh_plan.judge), or under
`fabric.min_gbps`, is a problem; a node all of whose links are slow is named for its own link.
In `up` a link slow only against the others is a warning (relative_is_warning).
No SSH, thread or clock in this module.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace

from pydantic import BaseModel, ConfigDict

from k3deploy import engines
from k3deploy.cluster.inventory import Inventory
from k3deploy.cluster import mesh_plan
from k3deploy.core.errors import K3Error
from k3deploy.core.jsonvalue import JSON
from k3deploy.core.state import StateDoc
from k3deploy.facts import record as record_facts
from k3deploy.facts.fabric_mesh import MeshCount, MeshFailed, parse_answer
from k3deploy.node import facts as F
from k3deploy.node.context import NodeContext, RunContext
from k3deploy.node.output_tail import failure_tail
from k3deploy.node.ssh_types import Result
from k3deploy.remote import script_text
from k3deploy.remote.fabric_mesh import Found as MeshFound
from k3deploy.steps.engine import serves
from k3deploy.steps.base import AnyFact, ClusterProbe, Step
from k3deploy.steps.engine import launch_look
from k3deploy.steps.engine.launch_look import LaunchFacts

SCRIPT = script_text("fabric_mesh.py")
KEY = "fabric_mesh"
# A round's handshake: a partner not in the round this long after this node is given up (its
# SSH session started that much later, or it hangs); more than the nodes' start skew over SSH.
HANDSHAKE = 10.0
FLUSH = 5.0        # after the partner's push: what its socket buffers still hold arrives
PERFTEST = "ib_write_bw"


def round_limit(inv: Inventory) -> float:
    """The longest a round lasts on a node: the partner may start its push up to HANDSHAKE late."""
    return HANDSHAKE + inv.fabric.seconds + FLUSH


def schedule_seconds(inv: Inventory, nodes: int) -> float:
    """The longest the node program runs (every round at its limit)."""
    return len(mesh_plan.rounds([str(i) for i in range(nodes)])) * round_limit(inv)


def _plan(run: RunContext, name: str, partners: list[str | None]) -> str:
    inv = run.inv
    rounds = [None if p is None else [p, inv.node(p).self_ip] for p in partners]
    return json.dumps({"me": name, "listen": inv.node(name).self_ip, "port": inv.ports.mesh,
                       "rounds": rounds, "seconds": inv.fabric.seconds,
                       "deadline": HANDSHAKE, "round_limit": round_limit(inv)})


def _answer(res: Result) -> MeshCount | MeshFailed:
    return parse_answer(res.stdout) or MeshFailed(
        f"the mesh program exited {res.exit_code}: "
        + (" | ".join(failure_tail(f"{res.stdout}\n{res.stderr}".strip(), 4)) or "no output"))


@dataclass(frozen=True)
class FabricMeshFacts:
    perftest: str | None                   # ib_write_bw's path ('' when absent)
    # derived (with unless_serving): the node's engine runs the launch's configuration
    runs_configuration: bool = False
    fabric_mesh: MeshCount | MeshFailed | K3Error | None = None   # the runner's cluster look


class FabricMeshParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # up's: not on a group that already runs this configuration (the launch leaves it as it
    # is, and the mesh would push its traffic through the fabric the group serves over)
    unless_serving: bool = False
    # up's: a link slow only against the others (measured, above fabric.min_gbps) is a warning,
    # not a stop: a relative figure taken once on a shared fabric is noisy, and a false stop
    # costs the cluster's hour; the floor the user set, and a link that carries nothing, stop up.
    relative_is_warning: bool = False


class FabricMesh(Step[FabricMeshFacts, FabricMeshParams]):
    name = "fabric-mesh"
    read_only = True
    Params = FabricMeshParams
    Facts = FabricMeshFacts

    def probes(self, node: NodeContext) -> list[AnyFact]:
        found: list[AnyFact] = [F.command("perftest", ["sh", "-c", f"command -v {PERFTEST} || true"])]
        if self._looks_at_launch(node):
            found += launch_look.probes(node)   # the launch's own look: what it would run
        return found

    def _looks_at_launch(self, node: NodeContext) -> bool:
        return self.p.unless_serving and not node.run.option("no_fabric")

    def observe(self, found: Mapping[str, object], node: NodeContext) -> FabricMeshFacts:
        if not self._looks_at_launch(node):
            return record_facts(FabricMeshFacts, found)
        theirs = {f.name for f in launch_look.probes(node)}
        seen = record_facts(FabricMeshFacts, {k: v for k, v in found.items() if k not in theirs})
        looked = launch_look.with_spec(
            record_facts(LaunchFacts, {k: v for k, v in found.items() if k in theirs}), node)
        return replace(seen, runs_configuration=_runs_configuration(looked))

    def skipped(self, all_facts: Mapping[str, FabricMeshFacts], run: RunContext) -> str | None:
        """Why this run measures nothing (None: it measures)."""
        if run.option("no_fabric"):
            return "--no-fabric"
        if self.p.unless_serving and all(f.runs_configuration for f in all_facts.values()):
            return ("the group already runs this configuration: no traffic is pushed through "
                    "the fabric it serves over")
        return None

    def cluster_probes(self, all_facts: dict[str, FabricMeshFacts],
                       run: RunContext) -> dict[str, ClusterProbe | tuple[ClusterProbe, ...]]:
        names = [n.name for n in run.inv.nodes if n.name in all_facts]
        if len(names) < 2 or self.skipped(all_facts, run):
            return {}
        timeout = schedule_seconds(run.inv, len(names)) + 60
        return {n: ClusterProbe(KEY, ("python3", "-", _plan(run, n, partners)), _answer,
                                stdin=SCRIPT, timeout=timeout)
                for n, partners in mesh_plan.partners(names).items()}

    def cluster_problems(self, all_facts: dict[str, FabricMeshFacts],
                         run: RunContext) -> list[tuple[str, str, str]]:
        found = {n: f.fabric_mesh for n, f in all_facts.items() if f.fabric_mesh is not None}
        broken = [(n, "fabric", str(v) if isinstance(v, K3Error) else v.error)
                  for n, v in found.items() if isinstance(v, (K3Error, MeshFailed))]
        if broken or not found:
            return broken
        verdict = verdict_of(run, _measured(all_facts))
        return [(_owner(lk, verdict.nodes), "fabric", _slow_line(lk, verdict, run.inv))
                for lk in verdict.slow if not self._warned(lk, run.inv)]

    def _warned(self, link: mesh_plan.Link, inv: Inventory) -> bool:
        """A slow link this run reports as a warning instead of a problem."""
        return self.p.relative_is_warning and link.gbps is not None and not _under_floor(link, inv)

    def cluster_detail(self, all_facts: dict[str, FabricMeshFacts],
                       run: RunContext) -> dict[str, JSON] | None:
        found = _measured(all_facts)
        return {"fabric": record(run, found)} if found else None

    def closing_lines(self, run: RunContext, all_facts: dict[str, FabricMeshFacts]) -> list[str]:
        found = _measured(all_facts)
        if not found:
            why = len(all_facts) > 1 and self.skipped(all_facts, run)
            return [f"fabric: not measured ({why})"] if why else []
        verdict = verdict_of(run, found)
        measured = [lk.gbps for lk in mesh_plan.links(_docs(found), list(found)) if lk.gbps]
        lines = [f"fabric: {len(measured)} links measured over the private network"
                 + (f", the nodes' best links' median {verdict.median_gbps:.2f} Gbit/s, slowest "
                    f"{min(measured):.2f} Gbit/s" if measured else "")]
        lines += [f"warning: {_slow_line(lk, verdict, run.inv)} (`k3deploy check --fabric` "
                  "measures again; fabric.min_gbps sets a floor that stops up)"
                  for lk in verdict.slow if self._warned(lk, run.inv)]
        with_perftest = [n for n, f in all_facts.items() if f.perftest]
        lines.append("fabric: InfiniBand links not measured ("
                     + (f"{PERFTEST} on {', '.join(with_perftest)}, but k3deploy does not run it yet"
                        if with_perftest else f"no {PERFTEST} (perftest) on the nodes") + ")")
        return lines


def _runs_configuration(looked: LaunchFacts) -> bool:
    """The node's engine runs what the launch would start (the launch's observed facts)."""
    if looked.spec is None:
        return False
    return serves.runs_configuration(looked.container, looked.spec.labels[engines.CONFIG_LABEL])


def _measured(all_facts: Mapping[str, FabricMeshFacts]) -> dict[str, MeshCount]:
    """node -> what its mesh program counted (nodes whose program ran)."""
    return {n: f.fabric_mesh for n, f in all_facts.items() if isinstance(f.fabric_mesh, MeshCount)}


def _docs(found: Mapping[str, MeshCount]) -> dict[str, MeshFound]:
    """The counts as the program printed them: what cluster/mesh_plan.links reads."""
    return {n: {"received": {s: {"bytes": r.bytes, "seconds": r.seconds}
                             for s, r in c.received.items()},
                "sent": dict(c.sent), "errors": dict(c.errors)} for n, c in found.items()}


def record(run: RunContext, found: dict[str, MeshCount]) -> dict[str, JSON]:
    """The figures for the state file, status --json and the certificate. The InfiniBand
    links are never measured here (perftest is not run): ib_measured says so."""
    verdict = verdict_of(run, found)
    names = [n.name for n in run.inv.nodes if n.name in found]

    def one(lk: mesh_plan.Link) -> dict[str, JSON]:
        return {"a": lk.src, "b": lk.dst,
                "gbps": None if lk.gbps is None else round(lk.gbps, 3),
                **({"error": lk.error} if lk.gbps is None else {})}
    return {"links": [one(lk) for lk in mesh_plan.links(_docs(found), names)],
            "slow": [one(lk) for lk in verdict.slow], "slow_nodes": list(verdict.nodes),
            "median_best_gbps": None if verdict.median_gbps is None
            else round(verdict.median_gbps, 3), "ib_measured": False}


def kept(head_state: StateDoc) -> JSON:
    """The last figures a mesh recorded, from the head's state file (its data)."""
    rec = (head_state.get("steps") or {}).get(FabricMesh.name) or {}
    return (rec.get("detail") or {}).get("fabric")


def verdict_of(run: RunContext, found: dict[str, MeshCount]) -> mesh_plan.Verdict:
    names = [n.name for n in run.inv.nodes if n.name in found]
    return mesh_plan.judge(mesh_plan.links(_docs(found), names), run.inv.fabric.min_gbps)


def _owner(link: mesh_plan.Link, slow_nodes: list[str]) -> str:
    return next((n for n in (link.src, link.dst) if n in slow_nodes), link.src)


def _under_floor(link: mesh_plan.Link, inv: Inventory) -> bool:
    """The measured link is under the floor the user set (fabric.min_gbps)."""
    floor = inv.fabric.min_gbps   # its callers ask only of a measured link (gbps)
    return floor is not None and bool(floor) and link.gbps is not None and link.gbps < floor


def _slow_line(link: mesh_plan.Link, verdict: mesh_plan.Verdict, inv: Inventory) -> str:
    if link.gbps is None:
        return f"link {link.name}: nothing measured ({link.error})"
    floor = f"half the median of the nodes' best links {verdict.median_gbps:.2f} Gbit/s"
    if _under_floor(link, inv):
        floor = f"fabric.min_gbps {inv.fabric.min_gbps:g}"
    whose = (f"; every link of {_owner(link, verdict.nodes)} is slow: look at its NIC, cable "
             "and switch port" if set(verdict.nodes) & {link.src, link.dst} else "")
    return f"link {link.name}: {link.gbps:.2f} Gbit/s, under {floor}{whose}"

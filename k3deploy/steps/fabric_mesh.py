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

from pydantic import BaseModel, ConfigDict

from k3deploy import engines
from k3deploy.cluster import mesh_plan
from k3deploy.core.errors import K3Error
from k3deploy.core.lastjson import last_json_line
from k3deploy.node import facts as F
from k3deploy.node.output_tail import failure_tail
from k3deploy.remote import script_text
from k3deploy.steps import serves
from k3deploy.steps.base import ClusterProbe, Step
from k3deploy.steps.launch import LaunchEngine

SCRIPT = script_text("fabric_mesh.py")
KEY = "fabric_mesh"
# A round's handshake: a partner not in the round this long after this node is given up (its
# SSH session started that much later, or it hangs); more than the nodes' start skew over SSH.
HANDSHAKE = 10.0
FLUSH = 5.0        # after the partner's push: what its socket buffers still hold arrives
PERFTEST = "ib_write_bw"


def round_limit(inv) -> float:
    """The longest a round lasts on a node: the partner may start its push up to HANDSHAKE late."""
    return HANDSHAKE + inv.fabric.seconds + FLUSH


def schedule_seconds(inv, nodes: int) -> float:
    """The longest the node program runs (every round at its limit)."""
    return len(mesh_plan.rounds(list(range(nodes)))) * round_limit(inv)


def _plan(run, name: str, partners: list[str | None]) -> str:
    inv = run.inv
    rounds = [None if p is None else [p, inv.node(p).self_ip] for p in partners]
    return json.dumps({"me": name, "listen": inv.node(name).self_ip, "port": inv.ports.mesh,
                       "rounds": rounds, "seconds": inv.fabric.seconds,
                       "deadline": HANDSHAKE, "round_limit": round_limit(inv)})


def _answer(res) -> dict:
    found = last_json_line(res.stdout)
    if isinstance(found, dict) and ("received" in found or "error" in found):
        return found
    return {"error": f"the mesh program exited {res.exit_code}: "
                     + (" | ".join(failure_tail(f"{res.stdout}\n{res.stderr}".strip(), 4))
                        or "no output")}


class FabricMeshParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # up's: not on a group that already runs this configuration (the launch leaves it as it
    # is, and the mesh would push its traffic through the fabric the group serves over)
    unless_serving: bool = False
    # up's: a link slow only against the others (measured, above fabric.min_gbps) is a warning,
    # not a stop: a relative figure taken once on a shared fabric is noisy, and a false stop
    # costs the cluster's hour; the floor the user set, and a link that carries nothing, stop up.
    relative_is_warning: bool = False


class FabricMesh(Step):
    name = "fabric-mesh"
    read_only = True
    Params = FabricMeshParams

    def probes(self, node):
        found = [F.command("perftest", ["sh", "-c", f"command -v {PERFTEST} || true"])]
        if self.p.unless_serving and not node.run.option("no_fabric"):
            found += LaunchEngine().probes(node)   # the launch's own look: what it would run
        return found

    def observe(self, found, node):
        if "container" not in found:
            return {"perftest": found.get("perftest")}
        config = LaunchEngine().spec(found, node).labels[engines.CONFIG_LABEL]
        return {"perftest": found.get("perftest"), "runs_configuration":
                serves.runs_configuration(found["container"], config)}

    def skipped(self, all_facts, run) -> str | None:
        """Why this run measures nothing (None: it measures)."""
        if run.option("no_fabric"):
            return "--no-fabric"
        if self.p.unless_serving and all(f.get("runs_configuration") for f in all_facts.values()):
            return ("the group already runs this configuration: no traffic is pushed through "
                    "the fabric it serves over")
        return None

    def cluster_probes(self, all_facts, run):
        names = [n.name for n in run.inv.nodes if n.name in all_facts]
        if len(names) < 2 or self.skipped(all_facts, run):
            return {}
        timeout = schedule_seconds(run.inv, len(names)) + 60
        return {n: ClusterProbe(KEY, ("python3", "-", _plan(run, n, partners)), _answer,
                                stdin=SCRIPT, timeout=timeout)
                for n, partners in mesh_plan.partners(names).items()}

    def cluster_problems(self, all_facts, run):
        found = {n: f[KEY] for n, f in all_facts.items() if KEY in f}
        broken = [(n, "fabric", str(v) if isinstance(v, K3Error) else v["error"])
                  for n, v in found.items() if isinstance(v, K3Error) or "error" in v]
        if broken or not found:
            return broken
        verdict = verdict_of(run, found)
        return [(_owner(lk, verdict.nodes), "fabric", _slow_line(lk, verdict, run.inv))
                for lk in verdict.slow if not self._warned(lk, run.inv)]

    def _warned(self, link: mesh_plan.Link, inv) -> bool:
        """A slow link this run reports as a warning instead of a problem."""
        return self.p.relative_is_warning and link.gbps is not None and not _under_floor(link, inv)

    def cluster_detail(self, all_facts, run):
        found = _measured(all_facts)
        return {"fabric": record(run, found)} if found else None

    def closing_lines(self, run, all_facts) -> list[str]:
        found = _measured(all_facts)
        if not found:
            why = len(all_facts) > 1 and self.skipped(all_facts, run)
            return [f"fabric: not measured ({why})"] if why else []
        verdict = verdict_of(run, found)
        measured = [lk.gbps for lk in mesh_plan.links(found, list(found)) if lk.gbps]
        lines = [f"fabric: {len(measured)} links measured over the private network"
                 + (f", the nodes' best links' median {verdict.median_gbps:.2f} Gbit/s, slowest "
                    f"{min(measured):.2f} Gbit/s" if measured else "")]
        lines += [f"warning: {_slow_line(lk, verdict, run.inv)} (`k3deploy check --fabric` "
                  "measures again; fabric.min_gbps sets a floor that stops up)"
                  for lk in verdict.slow if self._warned(lk, run.inv)]
        with_perftest = [n for n, f in all_facts.items() if f.get("perftest")]
        lines.append("fabric: InfiniBand links not measured ("
                     + (f"{PERFTEST} on {', '.join(with_perftest)}, but k3deploy does not run it yet"
                        if with_perftest else f"no {PERFTEST} (perftest) on the nodes") + ")")
        return lines


def _measured(all_facts: dict) -> dict:
    """node -> what its mesh program counted (nodes whose program ran)."""
    return {n: f[KEY] for n, f in all_facts.items()
            if isinstance(f.get(KEY), dict) and "received" in f[KEY]}


def record(run, found: dict) -> dict:
    """The figures for the state file, status --json and the certificate. The InfiniBand
    links are never measured here (perftest is not run): ib_measured says so."""
    verdict = verdict_of(run, found)
    names = [n.name for n in run.inv.nodes if n.name in found]

    def one(lk: mesh_plan.Link) -> dict:
        return {"a": lk.src, "b": lk.dst,
                "gbps": None if lk.gbps is None else round(lk.gbps, 3),
                **({"error": lk.error} if lk.gbps is None else {})}
    return {"links": [one(lk) for lk in mesh_plan.links(found, names)],
            "slow": [one(lk) for lk in verdict.slow], "slow_nodes": verdict.nodes,
            "median_best_gbps": None if verdict.median_gbps is None
            else round(verdict.median_gbps, 3), "ib_measured": False}


def kept(head_state: dict) -> dict | None:
    """The last figures a mesh recorded, from the head's state file (its data)."""
    rec = (head_state.get("steps") or {}).get(FabricMesh.name) or {}
    return (rec.get("detail") or {}).get("fabric")


def verdict_of(run, found: dict) -> mesh_plan.Verdict:
    names = [n.name for n in run.inv.nodes if n.name in found]
    return mesh_plan.judge(mesh_plan.links(found, names), run.inv.fabric.min_gbps)


def _owner(link: mesh_plan.Link, slow_nodes: list[str]) -> str:
    return next((n for n in (link.src, link.dst) if n in slow_nodes), link.src)


def _under_floor(link: mesh_plan.Link, inv) -> bool:
    """The measured link is under the floor the user set (fabric.min_gbps)."""
    return bool(inv.fabric.min_gbps) and link.gbps < inv.fabric.min_gbps


def _slow_line(link: mesh_plan.Link, verdict: mesh_plan.Verdict, inv) -> str:
    if link.gbps is None:
        return f"link {link.name}: nothing measured ({link.error})"
    floor = f"half the median of the nodes' best links {verdict.median_gbps:.2f} Gbit/s"
    if _under_floor(link, inv):
        floor = f"fabric.min_gbps {inv.fabric.min_gbps:g}"
    whose = (f"; every link of {_owner(link, verdict.nodes)} is slow: look at its NIC, cable "
             "and switch port" if set(verdict.nodes) & {link.src, link.dst} else "")
    return f"link {link.name}: {link.gbps:.2f} Gbit/s, under {floor}{whose}"

"""Multi-node vLLM over Ray: what the ray-cluster, launch and wait steps share.

The layout is vLLM's run_cluster.sh pattern: every node runs the vLLM image with
`ray start --block` as the container's main process (the ray-cluster step), then `vllm serve`
is exec'd in the head's container and places its DP ranks on every node through Ray.

The exec'd serve is not the container's main process, so `docker inspect` cannot see it.
Ray can: a running serve holds the cluster's GPUs in placement groups, and `ray status`
(run in the head container) shows them reserved (and used, when its Ray workers claim them);
they are freed when the serve exits.

`ray status` lags (facts/ray.py): a node that joined a moment ago is not in its report yet,
so launch waits (bounded) until the report counts every node and GPU.
"""

from __future__ import annotations

import re
from typing import Protocol

from k3deploy import engines
from k3deploy.cluster.inventory import Inventory
from k3deploy.core.errors import StepFailed
from k3deploy.engines import startup_log
from k3deploy.engines.layout import inventory_runs_over_ray
from k3deploy.engines.spec import LaunchSpec
from k3deploy.facts import http, ray
from k3deploy.facts.docker import Container
from k3deploy.facts.ray import RayStatus
from k3deploy.node import facts as F
from k3deploy.node import http_probe
from k3deploy.node.context import NodeContext
from k3deploy.steps import probes
from k3deploy.steps.base import Action, AnyFact, cmd, wait

RAY_STARTED = "Ray runtime started"   # printed by `ray start` once the node is registered
# Several report intervals (5 s each) after the last worker registered: the report then
# counts it, or the node never made it into the cluster.
SETTLE_SECONDS = 60.0
_EXITED = re.compile(re.escape(engines.SERVE_EXITED) + r" (\d+)")
_ERROR_LINE = re.compile(r"\((?:\S+ )?pid=\d+(?:, ip=([0-9a-fA-F.:]+))?\) ERROR ")
SERVE_START_SECONDS = 300.0  # real vLLM imports torch and reads the config before placing
SERVE_GONE_HINT = ("`k3deploy logs -i INV` saves the head's serve log (the exec'd serve writes "
                   "it to the serve-logs dir in the node's work dir); fix what it names")


def in_use(inv: Inventory) -> bool:
    """Multi-node vLLM: the only layout that runs over Ray (engines/layout.py decides)."""
    return inventory_runs_over_ray(inv)


class RayLaunchFacts(Protocol):
    """What launch knows on a node of a Ray layout (its Facts' fields of these names)."""

    @property
    def launch_spec(self) -> LaunchSpec: ...
    @property
    def container(self) -> Container | None: ...
    @property
    def ray(self) -> RayStatus | None: ...      # on the head only
    @property
    def healthy(self) -> bool: ...
    @property
    def log(self) -> str | None: ...            # only while a wait looks


def status_fact(container: str) -> F.Fact[RayStatus | None]:
    return F.command("ray", engines.docker_exec_argv(container, ["ray", "status"]),
                     ray.parse_status, sudo=True)


def whole_problem(status: RayStatus | None, inv: Inventory) -> str | None:
    """Why the cluster is not ready for `vllm serve`, or None when every node and GPU joined."""
    nodes, gpus = len(inv.nodes), inv.total_gpus
    if status is None:
        return "the Ray head does not answer `ray status`"
    if not status.reported:
        return "`ray status` has no cluster report yet (Ray writes one every few seconds)"
    if status.nodes < nodes or status.gpus < gpus:
        return (f"Ray has {status.nodes} of {nodes} nodes and {status.gpus:g} of {gpus} "
                "GPUs; vllm serve needs every node joined before it starts")
    return None


def serve_running(status: RayStatus | None, healthy: bool) -> bool:
    """The serve holds the cluster's GPUs: its placement groups reserve them (every vLLM over
    Ray creates them before its ranks start, and Ray frees them when the serve exits), in
    use or not: with TP 1 and DP over Ray the engine-core actors sit on the CPU bundle
    (vllm 0.33.0 v1/engine/utils.py, bundle index world_size) and `ray status` reads
    "0.0/16.0 GPU (0.0 used of 16.0 reserved in placement groups)"."""
    return healthy or bool(status and status.holds_gpus)


def head_probes(node: NodeContext) -> list[AnyFact]:
    """On the head: the cluster (every node joined?) and whether a serve already answers."""
    return [status_fact(node.inv.engine.container),
            http_probe.fact("health", node.inv, ["health"], node.run.inputs.api_key)]


def head_healthy(status: RayStatus | None, health: http.Endpoint | None) -> bool:
    """The head's serve answers /health (only where Ray answers: the serve runs in it)."""
    return status is not None and http_probe.healthy(health)


def _runs_this_config(facts: RayLaunchFacts) -> bool:
    current, want = facts.container, facts.launch_spec.labels[engines.CONFIG_LABEL]
    return bool(current and current.running
                and current.labels.get(engines.CONFIG_LABEL) == want)


def launch_plan(facts: RayLaunchFacts, node: NodeContext) -> list[Action]:
    """launch over Ray: the workers run nothing more; the head gets `vllm serve` once the
    cluster is whole, unless a serve already holds the GPUs."""
    spec = facts.launch_spec
    if not _runs_this_config(facts):
        if node.run.check:   # dry run: ray-cluster has not started the containers yet
            return [serve_action(spec)] if node.is_head else []
        raise StepFailed(node.name, f"the Ray container {spec.container_name} is not running "
                         "this configuration", step="launch",
                         hint="the ray-cluster step starts it; k3deploy up runs it before launch")
    if not node.is_head or serve_running(facts.ray, facts.healthy):
        return []
    problem = whole_problem(facts.ray, node.inv)
    # An earlier serve's log may end in its exit line: gone before anything is awaited, so
    # the exit line launch reads while it waits is this serve's.
    serve = [clear_log_action(node.inv), serve_action(spec), serve_wait()]
    return [serve[0], settle_wait(problem, node.inv), *serve[1:]] if problem else serve


def clear_log_action(inv: Inventory) -> Action:
    return cmd("clear the previous serve's log", "rm", "-f", probes.serve_log_path(inv),
               sudo=True, retry=True)


def settle_wait(problem: str, inv: Inventory) -> Action:
    """Until `ray status` counts every node and GPU: its report lags the cluster by up to one
    monitor interval, more right after the head started."""
    return wait("wait until `ray status` counts every node and GPU",
                f"`ray status` counts {len(inv.nodes)} nodes and {inv.total_gpus} GPUs",
                poll=1.0, timeout=SETTLE_SECONDS,
                hint=f"when launch planned it: {problem}; k3deploy up joins the workers "
                "(ray-cluster step); `k3deploy logs -i INV` shows each node's `ray start` output")


def serve_action(spec: LaunchSpec) -> Action:
    return cmd("start vllm serve in the Ray head (DP ranks on every node)",
               *engines.vllm_exec_serve_argv(spec), sudo=True)


def serve_wait() -> Action:
    """After the exec: until Ray reports the serve's placement groups (or it answers)."""
    return wait("wait until vllm serve holds the Ray cluster's GPUs",
                "vllm serve holds the Ray cluster's GPUs", timeout=SERVE_START_SECONDS,
                hint=SERVE_GONE_HINT)


def serve_alive(status: RayStatus | None, healthy: bool, inv: Inventory, log: str = "",
                image: str | None = None) -> bool:
    """During wait: True while the serve holds the GPUs; StepFailed once it let them go
    without answering (it exited), instead of waiting out the timeout; with its error line."""
    if serve_running(status, healthy):
        return True
    raise serve_failed(inv, "is not running (Ray holds none of the GPUs and the endpoint does "
                       "not answer)", "wait", log, image)


def check_serve_running(facts: RayLaunchFacts, inv: Inventory, step: str) -> None:
    """While launch waits on the head: StepFailed once the serve's log ends in its exit line
    (one that fails before Ray placed its ranks held nothing `ray status` would show)."""
    log = facts.log or ""
    code = serve_exited(log)
    if code is not None:
        image = facts.container.image if facts.container else None
        raise serve_failed(inv, f"exited ({code}) during its start-up", step, log, image)


def serve_exited(log: str) -> int | None:
    """The detached serve's exit status, from the line its shell appends (engines.vllm
    SERVE_EXITED); None while it runs."""
    found = _EXITED.findall(log)
    return int(found[-1]) if found else None


def blamed_node(log: str, inv: Inventory) -> str | None:
    """The node of the serve log's last ERROR line when a remote Ray actor printed it: Ray
    prefixes what a remote actor prints with "(ActorName pid=N, ip=ADDR)", a local one's
    without ip= (ray python/ray/_private/worker.py print_worker_logs). None: the head's own."""
    found = [m.group(1) for m in _ERROR_LINE.finditer(log)]
    # A node's own address names it; a gateway's, shared by the nodes behind it, names none.
    by_ip = {n.address: n.name for n in inv.nodes if not inv.behind_gateway(n)} \
        | {n.self_ip: n.name for n in inv.nodes}
    return by_ip.get(found[-1]) if found and found[-1] else None


def serve_failed(inv: Inventory, what: str, step: str, log: str,
                 image: str | None) -> StepFailed:
    """The serve gone: blamed on the node a Ray actor's error line names, else the head."""
    said = startup_log.error_line(log)
    node = blamed_node(log, inv) or inv.head.name
    where = "" if node == inv.head.name else f" (the failing ranks ran on {node})"
    return probes.engine_exit(node, f"vllm serve in the Ray head {what}{where}"
                              + (f": {said}" if said else "") + "\nthe end of its log:\n"
                              + "\n".join(log.splitlines()[-12:]), step, log, image,
                              SERVE_GONE_HINT)

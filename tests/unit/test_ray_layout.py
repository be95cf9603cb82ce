"""Multi-node vLLM over Ray (steps/ray.py, steps/engine/raylayout.py) and the vLLM reply shapes
verify accepts: facts in, actions out; no I/O."""

from __future__ import annotations


import pytest

from k3deploy import engines
from k3deploy.core import interrupt
from k3deploy.run.runner import Runner
from k3deploy.cluster import inventory
from k3deploy.node.context import NodeContext, RunContext
from k3deploy.node.run_inputs import RunInputs
from k3deploy.core.errors import StepFailed
from k3deploy.cluster.hubmeta import Manifest, RepoFile
from k3deploy.engines import startup_log
from k3deploy.facts import http
from k3deploy.facts.ray import RayStatus, parse_status
from k3deploy.steps.engine import raylayout
from k3deploy.steps.engine.launch import LaunchEngine
from k3deploy.steps.engine.ray_cluster import RayCluster
from k3deploy.steps.engine.verify import endpoint_problems, reasoning_field
from tests.realfix import real
from tests.unit.docker_facts import container
from tests.unit.fakes import FakeSession
from tests.unit.looked import looked

SHA = "a" * 40
KEY = "k3-testkey-0123456789"


def status_text(nodes: int, gpus: float, used: float = 0.0) -> str:
    """`ray status` as real Ray prints it (the stand-in copies this layout)."""
    active = "\n".join(f" 1 node_{i:056x}" for i in range(nodes))
    pg = f" ({used} used of {used} reserved in placement groups)" if used else ""
    return (f"======== Autoscaler status: 2026-07-27 10:00:00.000000 ========\nNode status\n"
            f"{'-' * 63}\nActive:\n{active}\nPending:\n (no pending nodes)\nRecent failures:\n"
            f" (no failures)\n\nResources\n{'-' * 63}\nUsage:\n 0.0/{nodes * 32}.0 CPU\n"
            f" {used}/{gpus} GPU{pg}\n 0B/1.00TiB memory\n\nDemands:\n (no resource demands)\n")


def b200_doc(nodes: int = 2, kind: str = "vllm", executor: str | None = "ray") -> dict:
    """executor: engine.executor of a multi-node vLLM doc (this module's layout: Ray)."""
    engine = {"kind": kind}
    if kind == "vllm" and nodes > 1 and executor:
        engine["executor"] = executor
    return {"cluster": "b200", "engine": engine, "gpu": {"model": "b200", "count": 8},
            "nodes": [{"name": f"node{i}", "address": f"10.0.0.{10 + i}"} for i in range(nodes)]}


def b200(nodes: int = 2) -> inventory.Inventory:
    return inventory.parse(b200_doc(nodes))


def ctx_for(tmp_path, rank=0, doc=None, check=False, conns=None):
    inv = inventory.parse(doc or b200_doc())
    run = RunContext(inv=inv, session=FakeSession(inv, tmp_path, conns), check=check)
    run.inputs = RunInputs(api_key=KEY, manifest=Manifest(
        "moonshotai/Kimi-K3", "main", SHA, None, (RepoFile("config.json", 10, "b" * 64, None),)))
    return NodeContext(run, inv.ranked()[rank][1], rank)


def health(ok: bool) -> http.Endpoint:
    return http.Endpoint(health=http.Answer(200) if ok else http.Answer(None, error="refused"))


def facts_for(ctx, running=True, ray=None, healthy=False, label=None, joined=True,
              step=None, log=None):
    """`step`'s facts (launch's by default) on a Ray layout node with a CUDA 13 driver: its
    container running this configuration (`label`: another's; running None: no container),
    the head's `ray status` and /health; `log` for a wait's look."""
    step = step or LaunchEngine()
    spec = looked(step, ctx, cuda="13.0").spec
    want = label or spec.labels[engines.CONFIG_LABEL]
    found = container(running, labels={engines.CONFIG_LABEL: want}) if running \
        is not None else None
    waiting = log is not None
    asked = {f.name for f in [*step.probes(ctx), *(step.wait_probes(ctx) if waiting else [])]}
    values = {"cuda": "13.0", "container": found, "ray": ray, "health": health(healthy),
              "joined": joined, "log": log}
    # each where the step asks it: the head's `ray status` and /health, ray-cluster's joined
    return looked(step, ctx, waiting, **{k: v for k, v in values.items() if k in asked})


def status(nodes: int, gpus: float, used: float = 0.0, reserved: float = 0.0,
           reported: bool = True) -> RayStatus:
    return RayStatus(gpus, used, reserved, nodes=nodes, reported=reported)


# -- ray status ---------------------------------------------------------------------------
def test_parse_status_counts_nodes_and_gpus():
    assert parse_status(status_text(2, 16.0), 0) == status(2, 16.0)
    assert parse_status(status_text(2, 16.0, 16.0), 0) == status(2, 16.0, 16.0, 16.0)
    assert parse_status("ConnectionError: Could not find any running Ray", 1) is None


def test_whole_problem_names_what_is_missing(tmp_path):
    inv = ctx_for(tmp_path).inv
    assert raylayout.whole_problem(status(2, 16.0), inv) is None
    assert "1 of 2 nodes and 8 of 16 GPUs" in raylayout.whole_problem(status(1, 8.0), inv)
    assert "does not answer" in raylayout.whole_problem(None, inv)


# -- launch over Ray ----------------------------------------------------------------------
def test_launch_execs_serve_on_the_head_once_every_node_joined(tmp_path):
    ctx = ctx_for(tmp_path)
    actions = LaunchEngine().plan(facts_for(ctx, ray=status(2, 16.0)), ctx)
    clear, serve, placed = actions
    # An earlier serve's exit line is gone before this serve is awaited.
    assert clear.argv[:2] == ("rm", "-f") and clear.argv[2].endswith("/vllm-serve.log")
    assert list(serve.argv[:5]) == ["docker", "exec", "-d", "k3", "sh"] and serve.sudo
    assert list(serve.argv[8:10]) == ["vllm", "serve"]
    assert KEY not in " ".join(serve.argv)
    # Then the runner waits until Ray shows the serve's placement groups.
    assert placed.wait.until == "vllm serve holds the Ray cluster's GPUs" and placed.wait.timeout


def test_launch_waits_for_ray_status_to_count_every_node_before_serving(tmp_path):
    """`ray status` lags the cluster (one report every 5 s): a partial count is a wait the
    runner executes, bounded, with the serve after it, not a failure."""
    ctx = ctx_for(tmp_path)
    clear, settle, serve, placed = LaunchEngine().plan(facts_for(ctx, ray=status(1, 8.0)), ctx)
    assert clear.argv[:2] == ("rm", "-f")
    assert settle.wait and settle.wait.timeout == raylayout.SETTLE_SECONDS
    assert "2 nodes and 16 GPUs" in settle.wait.until and "Ray has 1 of 2 nodes" in settle.wait.hint
    assert list(serve.argv[8:10]) == ["vllm", "serve"] and placed.wait
    fresh = status(0, 0.0, reported=False)
    assert LaunchEngine().plan(facts_for(ctx, ray=fresh), ctx)[1].waits_for(settle.wait)


def test_launch_leaves_a_running_serve_alone_and_workers_run_nothing(tmp_path):
    ctx = ctx_for(tmp_path)
    assert LaunchEngine().plan(facts_for(ctx, ray=status(2, 16.0, 16.0)), ctx) == []
    assert LaunchEngine().plan(facts_for(ctx, ray=status(2, 16.0), healthy=True), ctx) == []
    # /health is asked of the serve only where Ray answers: the serve runs in its container
    assert not facts_for(ctx, ray=None, healthy=True).healthy
    worker = ctx_for(tmp_path, rank=1)
    assert LaunchEngine().plan(facts_for(worker), worker) == []


def test_a_serve_whose_placement_groups_reserve_idle_gpus_holds_them_through_its_load(tmp_path):
    """TP 1, DP over Ray: `0.0/16.0 GPU (0.0 used of 16.0 reserved in placement groups)` for
    the whole of a load that outlasts SERVE_START_SECONDS (no /health yet): launch's serve wait
    is over (nothing left to plan) and wait's liveness check keeps waiting, never 'not
    running'."""
    ctx = ctx_for(tmp_path)
    reserved = status(2, 16.0, reserved=16.0)
    assert LaunchEngine().plan(facts_for(ctx, ray=reserved, healthy=False), ctx) == []
    assert raylayout.serve_alive(reserved, healthy=False, inv=b200())
    with pytest.raises(StepFailed, match="not running"):
        raylayout.serve_alive(status(2, 16.0), healthy=False, inv=b200())


def test_launch_without_the_ray_container_points_at_ray_cluster(tmp_path):
    ctx = ctx_for(tmp_path)
    with pytest.raises(StepFailed, match="not running this configuration") as err:
        LaunchEngine().plan(facts_for(ctx, running=None), ctx)
    assert "ray-cluster" in err.value.hint
    with pytest.raises(StepFailed):
        LaunchEngine().plan(facts_for(ctx, label="old"), ctx)
    dry = ctx_for(tmp_path, check=True)   # --check: ray-cluster would start it first
    assert [a.description for a in LaunchEngine().plan(facts_for(dry, running=None), dry)] == \
        ["start vllm serve in the Ray head (DP ranks on every node)"]


# -- ray-cluster --------------------------------------------------------------------------
def test_ray_cluster_plans_nothing_and_probes_nothing_off_the_ray_layout(tmp_path):
    for doc in (b200_doc(nodes=1), b200_doc(nodes=4, kind="sglang")):
        ctx = ctx_for(tmp_path, doc=doc)
        step = RayCluster()
        step.prepare(ctx.run)
        facts = step.facts(ctx)
        assert step.plan(facts, ctx) == []
        assert ctx.conn.commands == [] and step.detail(facts, ctx) is None


def test_ray_cluster_starts_the_head_with_the_key_file_and_workers_without(tmp_path):
    head = ctx_for(tmp_path)
    actions = RayCluster().plan(facts_for(head, running=None, step=RayCluster()), head)
    assert [a.description for a in actions] == ["create secrets dir (0700)",
                                                 "write the endpoint key (0600)",
                                                 "clear the previous engine's NCCL debug files",
                                                 "start the Ray head",
                                                 "wait until `ray start` registered this node"]
    assert actions[-1].wait.timeout == 120
    run = list(actions[-2].argv)
    assert run[run.index("--entrypoint") + 1] == "ray" and "--head" in run
    assert "--env-file" in run and KEY not in " ".join(run)
    worker = ctx_for(tmp_path, rank=1)
    clear, join, registered = RayCluster().plan(
        facts_for(worker, running=None, step=RayCluster()), worker)
    assert list(clear.argv[:2]) == ["rm", "-rf"] and clear.argv[-1].endswith("/nccl-logs")
    assert join.description == "join the Ray cluster (rank 1)" and registered.wait
    assert "--address=10.0.0.10:6379" in join.argv and "--env-file" not in join.argv


def test_ray_cluster_same_config_is_left_alone_other_needs_replace(tmp_path):
    ctx = ctx_for(tmp_path, rank=1)
    step = RayCluster()
    assert step.plan(facts_for(ctx, step=step), ctx) == []
    # Started (by a run that was cut short) but not registered yet: only the wait is left.
    (left,) = step.plan(facts_for(ctx, joined=False, step=step), ctx)
    assert left.wait.until == "`ray start` registered this node"
    with pytest.raises(StepFailed, match="runs another configuration"):
        step.plan(facts_for(ctx, label="old", step=step), ctx)


def test_wait_fails_fast_once_the_serve_let_go_of_the_gpus():
    held = parse_status(status_text(2, 16.0, 16.0), 0)
    assert raylayout.serve_alive(held, False, b200()) is True
    assert raylayout.serve_alive(parse_status(status_text(2, 16.0), 0), True, b200())
    gone = parse_status(status_text(2, 16.0), 0)
    with pytest.raises(StepFailed, match="vllm serve in the Ray head is not running"):
        raylayout.serve_alive(gone, False, b200())
    # The serve log (its own output, from the serve-logs file) names why: the exception
    # vLLM's engine start-up raises (v1/engine/utils.py wait_for_engine_startup).
    said = ("RuntimeError: Engine core initialization failed. See root cause above. "
            "Failed core proc(s): {}")
    log = f"(APIServer pid=7) INFO 12-01 20:47:58 [launcher.py:367] ...\n{said}\n"
    with pytest.raises(StepFailed, match=r"not answer\): RuntimeError: Engine core init"):
        raylayout.serve_alive(gone, False, b200(), log)


TWO_NODE_LOG = real("vllm/0.11.0/ray-dp-two-nodes-serve.txt")


def kuberay_nodes() -> inventory.Inventory:
    """The two nodes of the published log: the serve on 10.233.68.19, DP rank 1 on .69.249."""
    return inventory.parse({**b200_doc(), "nodes": [
        {"name": "head", "address": "192.0.2.1", "private_address": "10.233.68.19"},
        {"name": "gpu-b", "address": "192.0.2.2", "private_address": "10.233.69.249"}]})


def test_a_remote_ranks_error_line_names_its_node_by_rays_ip_prefix():
    inv = kuberay_nodes()
    # The real log's last ERROR line is the head's own rank's (no ip=): no other node to blame.
    assert raylayout.blamed_node(TWO_NODE_LOG, inv) is None
    # Up to the remote rank's ERROR line: its ip= names the node.
    remote = TWO_NODE_LOG.split("(APIServer pid=5332) (DPEngineCoreActor pid=5862) ERROR")[0]
    assert raylayout.blamed_node(remote, inv) == "gpu-b"
    assert startup_log.error_line(
        "(APIServer pid=7) (DPEngineCoreActor pid=9, ip=10.233.69.249) ValueError: No room"
    ) == "ValueError: No room"


def test_behind_one_ssh_gateway_the_private_address_names_the_node():
    doc = {**b200_doc(), "nodes": [
        {"name": "head", "address": "192.0.2.1", "port": 40100, "private_address": "10.233.68.19"},
        {"name": "gpu-b", "address": "192.0.2.1", "port": 40101, "private_address": "10.233.69.249"}]}
    inv = inventory.parse(doc)
    remote = TWO_NODE_LOG.split("(APIServer pid=5332) (DPEngineCoreActor pid=5862) ERROR")[0]
    assert raylayout.blamed_node(remote, inv) == "gpu-b"
    gateway = remote.replace("ip=10.233.69.249", "ip=192.0.2.1")   # no node's own address
    assert raylayout.blamed_node(gateway, inv) is None


def test_launch_fails_once_the_serve_log_ends_in_its_exit_line(tmp_path):
    """A serve that fails before Ray placed its ranks holds nothing `ray status` shows: the
    exit line its shell appends (engines.vllm.SERVE_EXITED) ends launch's wait at once, blamed
    on the node whose rank failed."""
    ctx = ctx_for(tmp_path)
    whole = parse_status(status_text(2, 16.0), 0)
    log = ("(APIServer pid=7) (DPEngineCoreActor pid=9, ip=10.0.0.11) ERROR 12-04 10:00:00 "
           "[core.py:708] EngineCore failed to start.\n(APIServer pid=7) (DPEngineCoreActor "
           "pid=9, ip=10.0.0.11) ValueError: No available memory for the cache blocks.\n"
           f"{engines.SERVE_EXITED} 1\n")
    facts = facts_for(ctx, ray=whole, healthy=False, log=log)
    with pytest.raises(StepFailed, match=r"exited \(1\) during its start-up") as failed:
        LaunchEngine().progress(facts, ctx)
    assert failed.value.node == "node1" and "No available memory" in str(failed.value)
    assert raylayout.serve_exited(log) == 1 and raylayout.serve_exited(log[:-30]) is None
    still = facts_for(ctx, ray=whole, healthy=False, log=log[:-30])
    assert LaunchEngine().progress(still, ctx) is None


# -- verify: vLLM's reply shapes ----------------------------------------------------------
def reply(message: dict, status: int = 200) -> http.Answer:
    return http.answer({"status": status, "body": {"choices": [{"message": message}]}})


MODELS = http.answer({"status": 200, "body": {"data": [{"id": "moonshotai/Kimi-K3"}]}})
CALL = {"tool_calls": [{"function": {"name": "get_weather"}}]}


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_verify_accepts_reasoning_under_either_name(field):
    msg = {"content": "answer", field: "thinking"}
    assert reasoning_field(reply(msg).message) == field
    assert endpoint_problems(http.Endpoint(models=MODELS, chat=reply(msg), tools=reply(CALL)),
                             "moonshotai/Kimi-K3") == []


def test_verify_still_catches_a_k2_parser_and_explains_a_refused_tool_call():
    leaked = reply({"content": "<think>x</think>answer", "reasoning": None})
    refused = http.answer({"status": 400, "body": {"error": {
        "message": "\"auto\" tool choice requires --enable-auto-tool-choice"}}})
    found = dict(endpoint_problems(http.Endpoint(models=MODELS, chat=leaked, tools=refused),
                                   "moonshotai/Kimi-K3"))
    assert "kimi_k2" in found["reasoning"]
    assert "answered 400" in found["tools"] and "--enable-auto-tool-choice" in found["tools"]


def test_the_runner_waits_through_ray_status_lag_then_serves(tmp_path, monkeypatch):
    """`ray status` as Ray 2.60 prints it right after the worker joined: no report, then the
    head alone, then both nodes: the waiter polls the launch plan until the serve is next."""
    monkeypatch.setattr(interrupt, "sleep", lambda seconds: None)   # the 1 s polls
    reports = [real("ray/2.x/status-no-report-yet.txt"), status_text(1, 8.0),
               real("ray/2.x/status-2nodes-16gpu.txt")]
    ctx = ctx_for(tmp_path)
    Runner(ctx.run, [])

    class Lagging(LaunchEngine):
        def facts(self, node, waiting=False):
            return facts_for(node, ray=parse_status(reports.pop(0), 0))

    step = Lagging()
    settle = step.plan(facts_for(ctx, ray=status(0, 0.0, reported=False)), ctx)[1]
    seen = ctx.run.executor.waiter(step, ctx, settle.wait)
    assert reports == [] and seen.ray.nodes == 2
    assert [a.argv[8:10] for a in step.plan(seen, ctx) if a.argv and a.argv[0] == "docker"] \
        == [("vllm", "serve")]

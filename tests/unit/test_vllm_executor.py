"""engine.executor for multi-node vLLM (issue 55): mp (vLLM's multiprocessing executor, one
`vllm serve` per node, the API node's first and --headless ones after, as vLLM's
docs/serving/data_parallel_deployment.md runs it) or ray; what each node's argv carries, that
every one passes vLLM 0.33.0's real option table, the rules `check` refuses with exit 2, what
`plan --emit-inventory` / `init` write, and the log lines that say each node is past its checks."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from k3deploy import engines
from k3deploy.cluster import inventory
from k3deploy.cluster.inventory_skeleton import skeleton_for
from k3deploy.cluster.sizing import size_config
from k3deploy.core.errors import EXIT_BAD_INPUT, InventoryError
from k3deploy.engines import cli_contract, spec_from_inventory, startup_log
from tests.realfix import real

REFERENCE = Path(__file__).resolve().parents[2] / "inventories" / "b200-2x8.yaml"
SHA = "0123456789abcdef0123456789abcdef01234567"


def doc(**engine) -> dict:
    found = yaml.safe_load(REFERENCE.read_text())
    found["engine"].update(engine)
    return found


def argvs(inv) -> list[list[str]]:
    return [a for rank, node in inv.ranked()
            for a in engines.node_launch_argvs(spec_from_inventory.build(
                inv, node, rank, "vllm/vllm-openai:v0.33.0", SHA, with_key=True))]


def serve_args(argv: list[str]) -> list[str]:
    return argv[argv.index("serve") + 1:]


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def problems(found) -> list[str]:
    with pytest.raises(InventoryError) as err:
        inventory.parse(found, "x.yaml")
    assert err.value.exit_code == EXIT_BAD_INPUT
    return err.value.problems


@pytest.mark.parametrize("executor", [None, "mp"])
def test_mp_is_one_vllm_serve_per_node_and_each_passes_the_real_option_table(executor):
    inv = inventory.parse(doc(executor=executor))
    api, headless = argvs(inv)
    for argv in (api, headless):
        assert argv[:2] == ["docker", "run"] and flag(argv, "--entrypoint") == "vllm"
        found = cli_contract.check_argv("vllm", serve_args(argv))
        assert [f.message for f in found if f.level == "error"] == [], argv
    assert "--headless" not in api and "--headless" in headless
    assert flag(headless, "--data-parallel-start-rank") == "8"
    for name, value in (("--data-parallel-size", "16"), ("--data-parallel-size-local", "8"),
                        ("--data-parallel-address", inv.head.self_ip),
                        ("--data-parallel-rpc-port", str(inv.ports.dist_init))):
        assert flag(api, name) == flag(headless, name) == value


def test_ray_keeps_the_ray_containers_and_the_heads_exec():
    head, serve, worker = argvs(inventory.parse(doc(executor="ray")))
    assert flag(head, "--entrypoint") == flag(worker, "--entrypoint") == "ray"
    assert serve[:3] == ["docker", "exec", "-d"] and flag(serve, "--data-parallel-backend") == "ray"
    assert "--headless" not in serve and "--data-parallel-address" not in serve


def test_mp_and_ray_launch_differently_so_a_running_group_reads_as_another_configuration():
    """`up` compares the config label: a Ray-launched group is replaced only with --replace."""
    mp, ray = (inventory.parse(doc(executor=e)) for e in ("mp", "ray"))
    specs = [spec_from_inventory.build(i, i.head, 0, "img", SHA, with_key=True) for i in (mp, ray)]
    assert engines.config_digest(specs[0]) != engines.config_digest(specs[1])
    labelled = [engines.with_config_label(s) for s in specs]
    assert engines.config_changes(labelled[1].labels, labelled[0])


def test_the_headless_node_holds_no_key():
    inv = inventory.parse(doc(executor="mp"))
    specs = [spec_from_inventory.build(inv, n, r, "img", SHA, with_key=True)
             for r, n in inv.ranked()]
    assert specs[0].secrets_host_dir is not None and specs[1].secrets_host_dir is None


def test_one_node_vllm_takes_mp_and_refuses_ray():
    one = doc(executor="mp")
    one["nodes"] = one["nodes"][:1]
    one["gpu"] = {"model": "b300", "count": 8}
    (argv,) = argvs(inventory.parse(one))
    assert "--headless" not in argv and "--data-parallel-address" not in argv
    one["engine"]["executor"] = "ray"
    assert any("engine.executor: ray needs more than one node" in p for p in problems(one))


def test_executor_is_a_vllm_setting_only():
    sg = doc(kind="sglang", executor="mp")
    sg["gpu"] = {"model": "h200", "count": 8}
    assert any(p.startswith("engine.executor: mp is a vLLM setting") for p in problems(sg))


@pytest.mark.parametrize("flag_name", ["data-parallel-backend", "distributed-executor-backend"])
def test_mp_with_a_ray_backend_in_engine_args_is_refused(flag_name):
    found = doc(executor="mp", args={flag_name: "ray"})
    assert any(p.startswith(f"engine.args.{flag_name}: ray asks for Ray") for p in problems(found))
    inventory.parse(doc(executor="ray", args={"data-parallel-backend": "ray"}))


def test_an_unknown_executor_is_refused():
    assert any("executor" in p for p in problems(doc(executor="nccl")))


def test_new_inventories_say_mp():
    skel = skeleton_for(size_config("b200", 2, 8, engine="vllm"))
    assert skel["engine"]["executor"] == "mp"
    inventory.parse(copy.deepcopy(skel))
    assert "executor" not in skeleton_for(size_config("b300", 1, 8, engine="vllm"))["engine"]
    assert "executor" not in skeleton_for(size_config("h100", 4, 8))["engine"]


def test_each_mp_node_says_it_is_past_its_checks_before_any_rank_joins():
    """The launch waits for this on node0 before it starts node1: a line after the group
    formed would never come."""
    assert startup_log.started("vllm", real("vllm/0.11.0/dp-coordinator-started.txt"))
    assert startup_log.started("vllm", real("vllm/0.33.x/serve-headless-start.txt"))
    args_only = real("vllm/0.11.0/dp-coordinator-started.txt").splitlines()[0]
    assert not startup_log.started("vllm", args_only)


def test_a_ray_clusters_containers_are_no_ranks_of_an_mp_group():
    """`up --replace` from Ray to mp: replacing the head's Ray container ends the worker's
    `ray start`; that worker was never a rank of the mp group, so launch starts it afresh
    instead of failing it as a rank that stopped after the look."""
    from k3deploy.steps.engine import regroup
    from tests.unit.docker_facts import container
    inv = inventory.parse(doc(executor="mp"))
    ray = {n.name: container(True, id=f"c-{n.name}", cmd=("start", "--block", f"--node-ip-address={n.self_ip}"))
           for n in inv.nodes}
    decided = regroup.decide(ray, inv)
    assert not decided.whole and decided.running == {} and decided.to_start == ("node0", "node1")
    mp = {n.name: container(True, id=f"c-{n.name}", cmd=("serve", "moonshotai/Kimi-K3"))
          for n in inv.nodes}
    assert sorted(regroup.decide(mp, inv).running) == ["node0", "node1"]
    assert regroup.decide({**mp, "node1": None}, inv).whole


def test_a_running_mp_node_reads_as_its_node_rank():
    """What the wait's stray/duplicate rank check and the regroup read of a running container."""
    from k3deploy.steps import probes
    inv = inventory.parse(doc(executor="mp"))
    api, headless = (serve_args(a) for a in argvs(inv))
    assert (probes.node_rank_arg(api), probes.node_rank_arg(headless)) == ("0", "1")
    ray_serve = serve_args(argvs(inventory.parse(doc(executor="ray")))[1])
    assert probes.node_rank_arg(ray_serve) is None
    assert probes.node_rank_arg(["sglang", "serve", "--node-rank", "3"]) == "3"

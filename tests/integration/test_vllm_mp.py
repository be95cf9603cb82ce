"""The 2x8 B200 vLLM config with engine.executor mp on the testbed: one `vllm serve` per node,
node0's serving the API and node1's --headless (vLLM docs/serving/data_parallel_deployment.md),
no Ray anywhere; a verified endpoint, the guard's fail-stop when the headless node dies, and
`up --replace` moving a Ray-launched group to mp. Needs root (the testbed)."""

from __future__ import annotations

import json
import os
import time

import pytest
from guard_probe import Follow, all_stopped_within, engine_running, incident, status
from tbfixture import set_engine, testbed

from k3deploy.cluster import inventory
from k3run import k3, out

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="the testbed needs root")]


def calls(tb) -> dict[str, list[list[str]]]:
    return {n: [c["argv"] for c in per["calls"]] for n, per in tb.stats()["nodes"].items()}


def engine_runs(argvs: list[list[str]]) -> list[list[str]]:
    return [a for a in argvs if a[:2] == ["docker", "run"] and "--entrypoint" in a]


def ray_calls(tb) -> list[str]:
    """Every Ray container started, or serve exec'd into one, on any node."""
    return [f"{n}: {' '.join(a[:12])}" for n, argvs in calls(tb).items() for a in argvs
            if (a[:2] == ["docker", "run"] and "ray" in a[a.index("--entrypoint") + 1:][:1])
            or a[:3] == ["docker", "exec", "-d"]]


def ray_processes(tb) -> list[str]:
    """A `ray` process on any node now (the stand-in runs as `.../entry.py ray start ...`)."""
    found = []
    for node in tb.nodes:
        ps = tb.ssh(node, "ps -eo args").stdout.splitlines()
        assert ps, node
        found += [f"{node}: {line}" for line in ps if line.split()[:1] in (["ray"], ["raylet"])
                  or " ray start" in line or "gcs_server" in line]
    return found


def slow_loads(tb) -> None:
    """Every node's load 4x vLLM's 600 s VLLM_ENGINE_READY_TIMEOUT_S default, as a ~40-minute
    K3 load is (vllm-project/vllm#38476), on the stand-ins' clock scaled 1/600: the API node
    serves only because the launch sets the 3600 s vLLM's K3 recipe uses (engines/docker.py;
    scripts/tb/standins/engine/ready_clock.py)."""
    script = ("import json, sys; p='/run/k3tb/node.json'; d=json.load(open(p)); "
              "d.update(json.loads(sys.argv[1])); json.dump(d, open(p, 'w'))")
    values = json.dumps({"engine_load_seconds": 4.0, "watchdog_time_scale": 1 / 600})
    for node in tb.nodes:
        assert tb.ssh(node, ["python3", "-c", script, values]).returncode == 0, node


def test_b200_vllm_mp_serves_without_ray_and_the_headless_node_dying_stops_it(tmp_path):
    with testbed(tmp_path, nodes=2, gpu="b200", gpus_per_node=8, engine="vllm") as tb:
        set_engine(tb, executor="mp")
        slow_loads(tb)
        inv = inventory.load(tb.inventory)
        up = k3("up", "-i", str(tb.inventory))
        assert up.returncode == 0, out(up)
        code, doc = status(tb)
        assert code == 0 and doc["cluster"]["state"] == "serving", doc["cluster"]
        assert ray_calls(tb) == [] and ray_processes(tb) == []
        runs = {n: engine_runs(a)[-1] for n, a in calls(tb).items()}
        api, headless = runs["node0"], runs["node1"]
        assert "--headless" not in api and "--headless" in headless
        addr = inv.head.self_ip
        for argv in (api, headless):
            assert argv[argv.index("--data-parallel-address") + 1] == addr
            assert argv[argv.index("--data-parallel-size-local") + 1] == "8"
        assert headless[headless.index("--data-parallel-start-rank") + 1] == "8"
        # `logs`: each node's own engine log (no Ray head's serve log file).
        saved = k3("logs", "-i", str(tb.inventory), "--out", str(tmp_path / "logs"))
        assert saved.returncode == 0, out(saved)
        files = {p.name: p.read_text() for p in (tmp_path / "logs").iterdir()}
        assert "node0-rank0-serve.log" not in files, sorted(files)
        assert "] Started DP Coordinator process" in files["node0-rank0-engine.log"]
        assert "Application startup complete." in files["node0-rank0-engine.log"]
        assert ("Launching 8 data parallel engine(s) in headless mode, with head node address "
                f"tcp://{addr}:{inv.ports.dist_init}.") in files["node1-rank1-engine.log"]
        assert sorted(doc["nodes"]) == ["node0", "node1"]
        assert all(n["live"]["reachable"] for n in doc["nodes"].values()), doc["nodes"]

        # The headless node is reclaimed: the API node's ranks lose their peers; the guard
        # stops what is left within its peer timeout.
        since = time.monotonic()
        tb.fault("kill-node", "node1")
        took = all_stopped_within(tb, ["node0"], inv.guard.peer_timeout + 10, since)
        print(f"node0 stopped {took:.1f}s after node1 was killed")
        failure = incident(tb, "node0")["failure"]
        assert (failure["node"], failure["kind"]) == ("node1", "unreachable"), failure
        # Back as a fresh machine: `watch --restart 1` relaunches the group, API node first.
        tb.fault("revive-node", "node1")
        watch = Follow(tb, "--restart", "1")
        try:
            stopped = watch.wait("stopped by the guard", 60)
            watch.wait("bring-up verified the endpoint again", 240, stopped)
            watch.wait(": serving", 60, stopped)
        finally:
            watch.stop()
        assert all(engine_running(tb, n) for n in tb.nodes)
        assert ray_calls(tb) == [] and ray_processes(tb) == []


def test_up_replace_moves_a_ray_launched_group_to_mp(tmp_path):
    with testbed(tmp_path, nodes=2, gpu="b200", gpus_per_node=8, engine="vllm") as tb:
        set_engine(tb, executor="ray")
        first = k3("up", "-i", str(tb.inventory), "--no-dry-fire")
        assert first.returncode == 0, out(first)
        assert ray_processes(tb)
        set_engine(tb, executor="mp")
        refused = k3("up", "-i", str(tb.inventory), "--no-dry-fire")
        said = " ".join(out(refused).split())
        assert refused.returncode == 1 and 'engine.executor: "ray" -> "mp"' in said, said
        assert "re-run with --replace" in said, said
        moved = k3("up", "-i", str(tb.inventory), "--no-dry-fire", "--replace")
        assert moved.returncode == 0, out(moved)
        code, doc = status(tb)
        assert code == 0 and doc["cluster"]["state"] == "serving", doc["cluster"]
        assert ray_processes(tb) == []
        for node, argvs in calls(tb).items():
            assert "--data-parallel-address" in engine_runs(argvs)[-1], node
        down = k3("down", "-i", str(tb.inventory))
        assert down.returncode == 0, out(down)
        for node in tb.nodes:
            assert tb.ssh(node, "docker ps -aq").stdout.strip() == "", node

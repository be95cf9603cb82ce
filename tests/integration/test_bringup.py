"""The 4x8 H100 bring-up as Ansible tests a playbook: check, apply, apply again; then the
teardown, including a spot node that is already gone."""

import json
import time

import pytest
from tbfixture import testbed

from k3run import changing_calls, k3, out, state

pytestmark = pytest.mark.integration


def daemon_json(tb, node):
    return tb.ssh(node, "cat /etc/docker/daemon.json 2>/dev/null || echo ABSENT").stdout


def node_calls(tb) -> dict[str, list[list[str]]]:
    """node -> every stand-in invocation (docker, nvidia-smi, systemctl...) so far, in order."""
    return {name: [c["argv"] for c in doc["calls"]] for name, doc in tb.stats()["nodes"].items()}


def test_check_apply_apply_again_then_down(tmp_path):
    seeded = '{"log-driver": "json-file"}'
    with testbed(tmp_path, nodes=4, overrides={"node1": {"daemon_json": seeded}}) as tb:
        inv = str(tb.inventory)
        before = {n: daemon_json(tb, n) for n in tb.nodes}

        check = k3("up", "-i", inv, "--check")
        assert check.returncode == 0, out(check)
        assert "would-change" in out(check)
        assert ("would: load lmsysorg/sglang:kimi-k3 from a peer that holds it (proven by its "
                "config), else pull it") in out(check)
        assert changing_calls(tb.stats()) == []
        assert {n: daemon_json(tb, n) for n in tb.nodes} == before
        assert tb.ssh("node0", "ls /mnt/nvme").stdout.strip() == ""

        started = time.monotonic()
        apply = k3("up", "-i", inv)
        first = time.monotonic() - started
        assert apply.returncode == 0, out(apply)
        assert "endpoint: http://" in out(apply)
        merged = tb.ssh("node1", "cat /etc/docker/daemon.json").stdout
        assert '"log-driver": "json-file"' in merged and '"data-root": "/mnt/nvme/docker"' in merged
        for node in tb.nodes:
            assert tb.ssh(node, "docker info --format '{{.DockerRootDir}}'").stdout.strip() == \
                "/mnt/nvme/docker"
            assert "Up" in tb.ssh(node, "docker ps --format '{{.Status}}'").stdout
        assert state(tb.inventory, "node2")["steps"]["launch"]["status"] == "changed"
        calls_after_apply = len(changing_calls(tb.stats()))

        before_again = node_calls(tb)
        started = time.monotonic()
        again = k3("--log-json", "up", "-i", inv)
        second = time.monotonic() - started
        assert again.returncode == 0, out(again)
        # one round trip per node, the head's included (verify's checks asked ahead, bounded)
        ssh = next(json.loads(line)["nodes"] for line in again.stderr.splitlines()
                   if '"run.ssh"' in line)
        assert {n: s["round_trips"] for n, s in ssh.items()} == {n: 1 for n in tb.nodes}, ssh
        for node, calls in node_calls(tb).items():   # one look per node: no tool run twice
            made = [" ".join(c) for c in calls[len(before_again[node]):]]
            assert made and len(set(made)) == len(made), (node, made)
            # the GPU-to-HCA layout is asked before a launch only: nvidia-smi once
            assert sum(c.startswith("nvidia-smi") for c in made) == 1, (node, made)
        for node in tb.nodes:
            steps = state(tb.inventory, node)["steps"]
            assert {s["status"] for s in steps.values()} == {"ok"}, (node, steps)
        assert len(changing_calls(tb.stats())) == calls_after_apply
        assert second < first

        # down --check: would-change exactly where down then changes something (on the node, or
        # the logs saved on the laptop), and nothing is done
        calls_before_down = len(changing_calls(tb.stats()))
        dry = k3("--log-json", "down", "-i", inv, "--check", "--out", str(tmp_path / "dry"))
        assert dry.returncode == 0, out(dry)
        assert len(changing_calls(tb.stats())) == calls_before_down
        assert not (tmp_path / "dry").exists()
        down = k3("--log-json", "down", "-i", inv, "--out", str(tmp_path / "logs"))
        assert down.returncode == 0, out(down)
        would = {k for k, (status, _) in step_results(dry).items() if status == "would-change"}
        did = {k for k, (status, actions) in step_results(down).items()
               if status == "changed" or actions}
        assert would == did and ("node0", "collect-logs") in did, (would, did)
        logs = sorted(p.name for p in (tmp_path / "logs").iterdir())
        assert "node0-rank0-engine.log" in logs and "node3-rank3-engine.log" in logs
        assert "fired up" in (tmp_path / "logs" / "node0-rank0-engine.log").read_text()
        for node in tb.nodes:
            assert tb.ssh(node, "docker ps -a -q").stdout.strip() == ""
        first_down = torn_down_records(inv)
        assert set(first_down) == set(tb.nodes), first_down
        again_down = k3("down", "-i", inv)
        assert again_down.returncode == 0 and "changed" not in out(again_down)
        assert torn_down_records(inv) == first_down  # the second down kept the first's record
        table = k3("status", "-i", inv)
        # The cluster's line names the last node's teardown (CI saw the four straddle a second).
        latest = max(first_down.values(), key=lambda r: r["at"])["when"]
        assert f"torn down {latest}, logs in {tmp_path / 'logs'}" in out(table), out(table)


def step_results(proc) -> dict:
    """(node, step) -> (status, actions), from --log-json's step.result events."""
    events = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    return {(e["node"], e["step"]): (e["status"], e["actions"]) for e in events
            if e["event"] == "step.result" and e.get("step")}


def torn_down_records(inv: str) -> dict:
    """status --json: which nodes show as torn down (when, logs); their engine steps say so."""
    proc = k3("status", "-i", inv, "--json")
    assert proc.returncode == 1, out(proc)  # every node answers; nothing serves
    doc = json.loads(proc.stdout)
    assert doc["cluster"]["state"] == "down" and doc["cluster"]["incident"] is None, doc["cluster"]
    nodes = doc["nodes"]
    for info in nodes.values():
        if info["torn_down"]:
            assert {info["state"][s]["status"] for s in ("launch", "wait", "verify")} == \
                {"torn down"}, info["state"]
            assert info["state"]["download"]["status"] == "ok"  # the weights stay
    return {n: info["torn_down"] for n, info in nodes.items() if info["torn_down"]}


def test_teardown_with_a_reclaimed_spot_node(tmp_path):
    with testbed(tmp_path, nodes=4) as tb:
        inv = str(tb.inventory)
        assert k3("up", "-i", inv).returncode == 0
        tb.fault("kill-node", "node2")
        started = time.monotonic()
        down = k3("down", "-i", inv, "--out", str(tmp_path / "logs"))
        # The dead node costs its connect attempts, not a hang: room for a loaded machine, far
        # below the 600 s command timeout.
        assert time.monotonic() - started < 120
        assert down.returncode == 3, out(down)
        assert "unreachable node2" in out(down)
        saved = sorted(p.name for p in (tmp_path / "logs").iterdir())
        assert [s for s in saved if s.endswith("engine.log")] == [
            "node0-rank0-engine.log", "node1-rank1-engine.log", "node3-rank3-engine.log"]
        for node in ("node0", "node1", "node3"):
            assert tb.ssh(node, "docker ps -a -q").stdout.strip() == ""
        again = k3("down", "-i", inv)
        assert again.returncode == 3 and "changed" not in out(again)

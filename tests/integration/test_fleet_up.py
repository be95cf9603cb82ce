"""`up` and `down` on a fleet (issue 54): two groups of two nodes behind the real SMG on the first
group's head. `up` brings both groups up with the one-group machinery, starts the router with its
keys off argv and registers both; a chat through the router answers with reasoning_content; a
second `up` changes nothing (no container run or removed on any node, the same worker ids);
the router removed by hand is started again by the next `up`, which registers both groups and
relaunches neither; `chat` and `bench` go through the router (`--group` to one group's
head), `verify` checks each group and the router; `status` shows the router holding both
groups ready and each group serving (exit 0), and after `down` the fleet down (exit 1: every
node answered, nothing serves); `down` takes the groups out, tears them down and stops the
router. Needs root (the testbed)."""

from __future__ import annotations

import json
import os
import urllib.request

import pytest
import yaml

from k3run import k3, out
from tbfixture import testbed

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300),
              pytest.mark.skipif(os.geteuid() != 0, reason="the testbed needs root")]


def secret(tb, name: str) -> str:
    cluster = yaml.safe_load(tb.inventory.read_text())["cluster"]
    return (tb.inventory.parent / ".k3deploy" / cluster / "secrets" / name).read_text().strip()


def post(url: str, body: dict, key: str | None = None, timeout: float = 60):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json",
                                          **({"Authorization": f"Bearer {key}"} if key else {})})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def get(url: str, key: str):
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def docker_changes(tb) -> dict[str, int]:
    """Per node: docker calls that change something (run, rm, stop, start, kill)."""
    nodes = tb.stats()["nodes"]
    return {n: sum(1 for c in nodes[n]["calls"] if c["tool"] == "docker"
                   and any(a in ("run", "rm", "stop", "start", "kill") for a in c["argv"][1:3]))
            for n in nodes}


def test_a_fleet_comes_up_behind_the_router_and_goes_down(tmp_path):
    with testbed(tmp_path, nodes=4, groups=2, gpu="h200", shard_bytes=100_000) as tb:
        inv = str(tb.inventory)
        up = k3("up", "-i", inv, "--no-dry-fire")
        assert up.returncode == 0, out(up)
        assert "a chat completion through it answered, with reasoning_content" in out(up)
        key, admin = secret(tb, "api-key"), secret(tb, "router-admin-key")
        base = f"http://{tb.address('node0')}:30000"
        reply = post(base + "/v1/chat/completions",
                     {"model": "moonshotai/Kimi-K3", "max_tokens": 64, "reasoning_effort": "low",
                      "messages": [{"role": "user", "content": "Say hello."}]}, key)
        message = reply["choices"][0]["message"]
        assert message["content"] and message["reasoning_content"]
        workers = get(base + "/workers", admin)["workers"]
        assert sorted(w["url"] for w in workers) == sorted(
            f"http://{tb.address(n)}:8000" for n in ("node0", "node2"))
        assert {w["status"] for w in workers} == {"ready"}
        ps = tb.ssh("node0", "ps -eww -o args").stdout
        assert "smg::router" in ps   # SMG names its process so (its launcher exec'd no key)
        assert key not in ps and admin not in ps
        for node in tb.nodes:   # every group's engine takes the fleet's one key
            assert key not in tb.ssh(node, "ps -eww -o args").stdout
        assert key not in out(up) and admin not in out(up)
        state = tb.inventory.parent / ".k3deploy"
        for path in state.rglob("*"):   # the keys only in their own 0600 files
            if path.is_file() and path.parent.name != "secrets":
                text = path.read_text(errors="replace")
                assert key not in text and admin not in text, path

        status = k3("status", "-i", inv, "--json")
        assert status.returncode == 0, out(status)
        doc = json.loads(status.stdout)
        assert set(doc) == {"fleet", "router", "groups"} and doc["fleet"]["state"] == "serving"
        assert doc["router"]["running"] and doc["router"]["node"] == "node0"
        assert {w["group"]: w["status"] for w in doc["router"]["workers"]} == \
            {"g0": "ready", "g1": "ready"}
        assert all(w["in_flight"] == 0 for w in doc["router"]["workers"])   # SMG's `load`, idle
        assert {g: d["cluster"]["state"] for g, d in doc["groups"].items()} == \
            {"g0": "serving", "g1": "serving"}
        assert key not in out(status) and admin not in out(status)
        shown = k3("status", "-i", inv)
        assert shown.returncode == 0, out(shown)
        assert shown.stdout.startswith("fleet ") and ": serving: " in shown.stdout.splitlines()[0]
        assert "group g0:" in shown.stdout and "group g1:" in shown.stdout

        # chat and bench go through the router; --group points them at one group's head
        said = k3("chat", "-i", inv, "Say hello.", "--json")
        assert said.returncode == 0, out(said)
        chat = json.loads(said.stdout)
        assert chat["endpoint"] == base + "/v1" and chat["content"] and chat["reasoning_content"]
        alone = k3("chat", "-i", inv, "Say hello.", "--json", "--group", "g1")
        assert alone.returncode == 0, out(alone)
        assert json.loads(alone.stdout)["endpoint"] == f"http://{tb.address('node2')}:8000/v1"
        bench = k3("bench", "-i", inv, "--concurrency", "1", "--seconds", "2", "--json")
        assert bench.returncode == 0, out(bench)
        figures = json.loads(bench.stdout)
        assert figures["endpoint"] == base + "/v1" and figures["levels"][0]["completed"] >= 1
        assert figures["certificate"] is None and key not in out(bench)
        saved = k3("logs", "-i", inv, "--out", str(tmp_path / "logs"))
        assert saved.returncode == 0, out(saved)
        for group, head in (("g0", "node0"), ("g1", "node2")):
            engine = (tmp_path / "logs" / group / f"{head}-rank0-engine.log").read_text()
            assert "The server is fired up and ready to roll!" in engine, group
        router_log = (tmp_path / "logs" / "router.log").read_text()
        assert router_log.strip() and key not in router_log and admin not in router_log
        checked = k3("verify", "-i", inv)   # each group's verify, then the router's
        assert checked.returncode == 0, out(checked)
        assert out(checked).count("verify of group") == 2, out(checked)
        assert "a chat completion through it answered" in out(checked)

        changes = docker_changes(tb)
        again = k3("up", "-i", inv, "--no-dry-fire")
        assert again.returncode == 0, out(again)
        assert "nothing to change" in out(again) and "; started" not in out(again)
        assert docker_changes(tb) == changes
        assert sorted(w["id"] for w in get(base + "/workers", admin)["workers"]) == sorted(
            w["id"] for w in workers)

        # the router removed by hand: the next up starts it and registers both groups again,
        # relaunching neither (no engine container run or removed)
        assert tb.ssh("node0", "docker rm -f k3-router").returncode == 0
        engines = docker_changes(tb)
        back = k3("up", "-i", inv, "--no-dry-fire")
        assert back.returncode == 0, out(back)
        assert "not running; started" in out(back) and "register group g1" in out(back)
        after = docker_changes(tb)
        assert after["node0"] == engines["node0"] + 2   # the router's `docker rm -f` and run
        assert {n: after[n] for n in ("node1", "node2", "node3")} == \
            {n: engines[n] for n in ("node1", "node2", "node3")}
        assert {w["status"] for w in get(base + "/workers", admin)["workers"]} == {"ready"}

        down = k3("down", "-i", inv)
        assert down.returncode == 0, out(down)
        assert "router: removed group g0" in out(down) and "router: removed group g1" in out(down)
        for node in tb.nodes:
            assert tb.ssh(node, "docker ps -aq").stdout.strip() == "", node
        assert "smg::router" not in tb.ssh("node0", "ps -eww -o args").stdout
        gone = k3("status", "-i", inv, "--json")
        assert gone.returncode == 1, out(gone)   # every node answered; nothing serves
        doc = json.loads(gone.stdout)
        assert doc["fleet"]["state"] == "down" and not doc["router"]["running"]
        assert {d["cluster"]["state"] for d in doc["groups"].values()} == {"down"}

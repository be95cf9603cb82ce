"""Every command's exit code as the README's table defines it: 2 bad input; 1 a step failed
(or a command whose goal is the whole cluster lost a node); 3 partial, for per-node work
(check, status, logs, down, run teardown) with a node out of reach. The runner's execution is
replaced by a canned report (real steps, real partial rule, no SSH)."""

from __future__ import annotations

from k3deploy.facts import http
from k3deploy.facts.nvidia_smi import Gpu

from pathlib import Path

import pytest
import yaml

from k3deploy.cli import init_cmd, status_cmd
from k3deploy.core.errors import UnreachableError
from k3deploy.run import runner as runner_mod
from k3deploy.run.report import StepResult
from tests.unit import test_cli
from tests.unit.docker_facts import container
from tests.unit.invdata import four_nodes

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"


def exit_code(argv) -> int:
    return test_cli.exit_code([str(a) for a in argv])


@pytest.fixture
def inv(tmp_path) -> Path:
    (tmp_path / "key").write_text("key\n")
    doc = four_nodes(ssh={"port": 9, "key": "key", "known_hosts": "kh", "connect_timeout": 1})
    for node in doc["nodes"]:
        node["private_address"] = node["address"]
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def canned(monkeypatch, outcome: str):
    """node1 fails the run's first step ("failed") or cannot be reached ("unreachable")."""
    def execute(self):
        for ctx in self.contexts:
            for i, step in enumerate(self.steps):
                status = "ok"
                if ctx.name == "node1":
                    status = outcome if outcome == "unreachable" or i == 0 else "blocked"
                self.report.set(ctx.name, step.label, StepResult(status))
        return self.report
    monkeypatch.setattr(runner_mod.Runner, "execute", execute)


RUNS = [(["check"], 1, 3), (["up"], 1, 1), (["run", "bringup"], 1, 1),
        (["run", "resume-download"], 1, 1), (["run", "teardown"], 1, 3), (["verify"], 1, 1),
        (["logs"], 1, 3), (["down"], 1, 3)]


@pytest.mark.parametrize("argv,failed,unreachable", RUNS, ids=[" ".join(r[0]) for r in RUNS])
def test_step_commands_on_a_failed_step_and_an_unreachable_node(argv, failed, unreachable, inv,
                                                                 monkeypatch):
    canned(monkeypatch, "failed")
    assert exit_code([*argv, "-i", inv]) == failed
    canned(monkeypatch, "unreachable")
    assert exit_code([*argv, "-i", inv]) == unreachable


BAD = [["check"], ["up"], ["run", "bringup"], ["status"], ["verify"], ["logs"], ["down"],
       ["watch"], ["chat", "hi"], ["bench"]]


@pytest.mark.parametrize("argv", BAD, ids=[" ".join(a) for a in BAD])
def test_bad_input_is_2_for_every_command(argv, tmp_path):
    assert exit_code([*argv, "-i", tmp_path / "missing.yaml"]) == 2


def test_bad_input_is_2_for_the_commands_without_an_inventory(tmp_path):
    assert exit_code(["plan", "--gpu", "a100"]) == 2
    assert exit_code(["certificate", "diff", tmp_path / "a.json", tmp_path / "b.json"]) == 2
    assert exit_code(["init", "10.0.0.1;reboot"]) == 2
    assert exit_code(["init", "10.0.0.1", "10.0.0.1"]) == 2
    assert exit_code(["init", "10.0.0.1", "--key", tmp_path / "nokey"]) == 2
    (tmp_path / "taken.yaml").write_text("x")
    assert exit_code(["init", "10.0.0.1", "-o", tmp_path / "taken.yaml"]) == 2
    assert exit_code(["init", "10.0.0.1", "-o", tmp_path / "no" / "dir.yaml"]) == 2
    assert exit_code(["run", "no-such-playbook", "-i", tmp_path / "x.yaml"]) == 2


def _live(running: bool, reachable: bool = True) -> dict:
    if not reachable:
        return {"reachable": False, "error": "cannot reach"}
    return {"reachable": True, "incident": None, "download": None, "identity": {}, "gpus": [],
            "guard": "watching", "health": http.Endpoint(health=http.Answer(200 if running else None)),
            "container": container(running)}


@pytest.mark.parametrize("lives,code", [((True, True), 0), ((True, False), 1),
                                        ((False, False), 1)],
                         ids=["serving", "degraded", "down"])
def test_status_exit_code_follows_the_cluster_state(lives, code, inv, monkeypatch):
    monkeypatch.setattr(status_cmd, "_live", lambda _s, _i, name, _k, _d: _live(
        lives[0] if name == "node0" else lives[1]))
    assert exit_code(["status", "-i", inv]) == code


def test_status_with_a_node_out_of_reach_is_partial(inv, monkeypatch):
    monkeypatch.setattr(status_cmd, "_live", lambda _s, _i, name, _k, _d: _live(True, name != "node2"))
    assert exit_code(["status", "-i", inv]) == 3


def _host_facts(address: str, gpus: int = 8) -> dict:
    from k3deploy.node import host_facts
    from k3deploy.node.host_facts import Address
    mounts = host_facts.parse_mounts(
        (REAL / "util-linux" / "2.38.1" / "findmnt-testbed-node.txt").read_text(), 0)
    return {"addresses": [Address("eth0", address, 24)], "mounts": mounts, "hostname": None,
            "gpus": [Gpu("NVIDIA H100 80GB HBM3", 81559, 0)] * gpus,
            "cuda": "13.0", "driver": "580.65.06", "user": "root"}


def fake_hosts(monkeypatch, gpus: dict[str, int], unreachable: str | None = None):
    from k3deploy.node.host_facts import Route

    def gather(conn, facts, **_kw):
        host = conn.ep.host
        if host == unreachable:
            raise UnreachableError(host, f"cannot reach {host}:22 after 3 attempts")
        if facts[0].name == "addresses":
            return _host_facts(host, gpus.get(host, 8))
        return {f.name: Route("eth0", host) for f in facts}
    monkeypatch.setattr(init_cmd.F, "gather", gather)


HOSTS = ["10.1.0.10", "10.1.0.11", "10.1.0.12"]


def test_init_exit_codes(tmp_path, monkeypatch):
    out = tmp_path / "c.yaml"
    fake_hosts(monkeypatch, {})
    assert exit_code(["init", *HOSTS, "-o", out]) == 0
    assert [n["private_address"] for n in yaml.safe_load(out.read_text())["nodes"]] == HOSTS
    fake_hosts(monkeypatch, {"10.1.0.11": 4})           # the hosts disagree: written, named, 1
    assert exit_code(["init", *HOSTS, "-o", out, "--force"]) == 1
    assert "# PROBLEM: node1: GPU count 4 differs from the other hosts' 8" in out.read_text()
    fake_hosts(monkeypatch, {}, unreachable="10.1.0.12")
    assert exit_code(["init", *HOSTS, "-o", tmp_path / "d.yaml"]) == 1
    assert not (tmp_path / "d.yaml").exists()


def test_a_hub_that_refuses_the_connection_is_a_failure_not_a_traceback(monkeypatch):
    import httpx2

    from k3deploy.cluster import hubmeta
    from k3deploy.core.errors import K3Error

    class Refusing:
        endpoint = "http://127.0.0.1:9"

        def repo_info(self, *_a, **_kw):
            raise httpx2.ConnectError("[Errno 111] Connection refused")
    monkeypatch.setattr(hubmeta, "_api", lambda endpoint, token: Refusing())
    with pytest.raises(K3Error) as err:
        hubmeta.resolve("moonshotai/Kimi-K3", "main", "http://127.0.0.1:9", None)
    assert err.value.exit_code == 1
    assert "cannot read moonshotai/Kimi-K3@main from http://127.0.0.1:9" in str(err.value)

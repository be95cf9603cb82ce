"""`verify -i FLEET` (run/fleet_verify.py): every group's own verify, then the router running,
holding every group ready, and a chat through it; nothing registered or started by it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import yaml

from k3deploy.cli import fleet_cmd
from k3deploy.cluster import fleet_registry as reg
from k3deploy.core.errors import EndpointError
from k3deploy.run import fleet_run, fleet_verify
from tests.unit.fleetdata import fleet_on_disk, two_groups


class Router:
    running, status, said = True, {}, []

    def __init__(self, fleet, keys, accept):
        self.fleet = fleet
        self.groups = [reg.GroupEndpoint(g.name, f"http://{g.name}:8000") for g in fleet.groups]
        self.where = "router on node0"
        self.host = SimpleNamespace(
            look=lambda: SimpleNamespace(container=SimpleNamespace(running=Router.running)),
            workers=lambda key: [{"id": n, "url": f"http://{n}:8000", "status": s}
                                 for n, s in Router.status.items()])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def verify(self):
        Router.said.append("verify")
        return "router on node0: a chat completion through it answered, with reasoning_content"


@pytest.fixture
def fleet_with_keys(tmp_path, monkeypatch):
    path = fleet_on_disk(tmp_path)
    ran: list[tuple[str, str]] = []
    codes = {"fl-a": 0, "fl-b": 0}

    def run_steps(inv, steps, **kw):
        ran.append((inv.cluster, steps[-1].name))
        return SimpleNamespace(exit_code=lambda: codes[inv.cluster])

    monkeypatch.setattr(fleet_run, "run_steps", run_steps)
    monkeypatch.setattr(fleet_verify, "FleetRouter", Router)
    Router.running, Router.status, Router.said = True, {"a": "ready", "b": "ready"}, []
    return str(path), ran, codes


def verify(path, capsys) -> tuple[int, str]:
    code = fleet_cmd.fleet_verify(fleet_cmd.fleet_of(path), accept_new_host_keys=False,
                                  state_dir=None, log_json=False)
    return code, capsys.readouterr().err


def test_every_group_verified_then_a_chat_through_the_router(fleet_with_keys, capsys):
    path, ran, _ = fleet_with_keys
    code, said = verify(path, capsys)
    assert code == 0 and ran == [("fl-a", "verify"), ("fl-b", "verify")]
    assert Router.said == ["verify"] and "with reasoning_content" in said


def test_a_group_the_router_does_not_hold_ready_fails_naming_it_and_the_fix(fleet_with_keys,
                                                                           capsys):
    path, _, _ = fleet_with_keys
    Router.status = {"a": "ready"}
    code, said = verify(path, capsys)
    assert code == 1 and Router.said == []
    assert "group b is not registered or not ready; `k3deploy up -i" in said


def test_a_router_not_running_or_a_group_failing_its_verify_fails(fleet_with_keys, capsys):
    path, _, codes = fleet_with_keys
    Router.running = False
    code, said = verify(path, capsys)
    assert code == 1 and "not running; `k3deploy up -i" in said
    Router.running, codes["fl-b"] = True, 1
    code, said = verify(path, capsys)
    assert code == 1 and "group(s) b failed their verify" in said


def test_a_fleet_never_brought_up_says_how(tmp_path):
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(two_groups()))
    with pytest.raises(EndpointError, match="never brought up"):
        fleet_cmd.fleet_verify(fleet_cmd.fleet_of(str(path)), accept_new_host_keys=False,
                               state_dir=None, log_json=False)

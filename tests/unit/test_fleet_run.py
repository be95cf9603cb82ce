"""`up` and `down` on a fleet without nodes: which groups the router is told to hold (from the
router's worker list and the groups that verified), the router's flags and container (keys in a
file, never argv), the fleet's one serving key in every group's key file, and the order `up`
and `down` take (groups by the one-group machinery, then the router; a failed group named and
not registered)."""

from __future__ import annotations

import json
import stat
from types import SimpleNamespace

import pytest
import yaml

from k3deploy.cluster import fleet, fleet_registry as reg, router_service as svc
from k3deploy.core.errors import BadInputError, UnreachableError
from k3deploy.node import apikey, fleet_keys
from k3deploy.run import fleet_run
from tests.unit import test_cli
from tests.unit.fleetdata import two_groups

A = reg.GroupEndpoint("a", "http://10.0.0.10:8000")
B = reg.GroupEndpoint("b", "http://10.0.0.12:8000")
GROUPS = [A, B]


def worker(wid: str, url: str, status: str = "ready") -> dict:
    return {"id": wid, "url": url, "status": status}


def test_an_empty_router_registers_every_verified_group_with_the_fleets_key():
    p = reg.register_plan([], GROUPS, {"a", "b"}, "k3-key")
    assert [(s.url, s.api_key) for s in p.adds] == [(A.url, "k3-key"), (B.url, "k3-key")]
    assert p.removes == [] and not reg.is_noop(p)
    assert reg.plan_lines(p, GROUPS, []) == [f"router: register group a ({A.url})",
                                            f"router: register group b ({B.url})"]


def test_a_router_holding_the_verified_groups_is_left_alone():
    workers = [worker("w1", A.url + "/"), worker("w2", B.url)]
    assert reg.is_noop(reg.register_plan(workers, GROUPS, {"a", "b"}, "k"))
    assert reg.not_ready(workers, GROUPS, {"a", "b"}) == []


def test_a_group_that_failed_is_not_registered_and_taken_out_if_it_was():
    workers = [worker("w1", A.url), worker("w2", B.url)]
    p = reg.register_plan(workers, GROUPS, {"a"}, "k")
    assert p.adds == [] and p.removes == ["w2"]
    assert reg.plan_lines(p, GROUPS, workers) == [f"router: remove group b ({B.url}) (worker w2)"]


def test_a_failed_worker_is_registered_anew_and_waited_for():
    workers = [worker("w1", A.url, "failed"), worker("w2", B.url, "pending")]
    p = reg.register_plan(workers, GROUPS, {"a", "b"}, "k")
    assert p.removes == ["w1"] and [s.url for s in p.adds] == [A.url]
    assert reg.not_ready(workers, GROUPS, {"a", "b"}) == ["a", "b"]
    assert reg.not_ready(workers, GROUPS, {"b"}) == ["b"]


def test_down_takes_out_one_groups_entries_not_one_already_draining():
    workers = [worker("w1", A.url), worker("w2", B.url), worker("w3", B.url, "draining")]
    assert reg.deregister_ids(workers, B) == ["w2"]
    assert reg.deregister_ids([], A) == []


def test_the_routers_keys_are_in_its_flags_file_and_never_in_its_docker_argv():
    parsed = fleet.parse(two_groups(router={"node": "node2", "port": 30100, "policy":
                                            "round_robin", "health_check_interval": 2}))
    argv = svc.smg_argv(parsed.router, "k3-serving", "admin-secret")
    assert argv[argv.index("--api-key") + 1] == "k3-serving"
    assert argv[argv.index("--control-plane-api-keys") + 1] == \
        "k3deploy:k3deploy admin:admin:admin-secret"
    assert ["--port", "30100"] == argv[2:4] and "round_robin" in argv
    assert json.loads(svc.args_document(argv)) == {"argv": argv}
    run = svc.docker_run_argv(parsed.router, "/mnt/nvme/.k3deploy/router")
    assert run[:4] == ["docker", "run", "-d", "--name"] and "k3-router" in run
    assert "/mnt/nvme/.k3deploy/router:/etc/k3deploy/router:ro" in run
    assert run[-2:] == ["/etc/k3deploy/router/router_launch.py", "/etc/k3deploy/router/router.json"]
    assert not any("secret" in a or "k3-serving" in a for a in run)
    assert "--api-key" not in svc.smg_argv(parsed.router, None, "admin-secret")
    assert svc.client_url(parsed) == "http://10.0.0.12:30100/v1"
    assert svc.host_inventory(parsed).cluster == "fl-b"
    assert [svc.worker_url(g) for g in fleet.split(parsed)] == [A.url, B.url]


def test_an_extra_router_node_uses_the_first_groups_settings():
    parsed = fleet.parse(two_groups(router={"node": {"name": "gw", "address": "10.0.0.99"}}))
    assert svc.host_inventory(parsed).cluster == "fl-a"
    assert svc.client_url(parsed) == "http://10.0.0.99:30000/v1"


def test_every_group_takes_the_fleets_one_serving_key(tmp_path):
    first = fleet.split(fleet.parse(two_groups()))[0]
    dirs = {"a": tmp_path / "fl-a", "b": tmp_path / "fl-b"}
    assert fleet_keys.load_or_create(first, tmp_path / "fl", dirs, create=False) is None
    keys = fleet_keys.load_or_create(first, tmp_path / "fl", dirs)
    assert keys and keys.serving and keys.admin and keys.serving != keys.admin
    for d in dirs.values():
        path = apikey.key_path(d)
        assert path.read_text().strip() == keys.serving
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert fleet_keys.load_or_create(first, tmp_path / "fl", dirs) == keys   # made once


def test_a_group_with_a_key_of_its_own_is_refused_naming_it(tmp_path):
    first = fleet.split(fleet.parse(two_groups()))[0]
    own = apikey.key_path(tmp_path / "fl-b")
    own.parent.mkdir(parents=True)
    own.write_text("k3-from-a-one-group-run\n")
    with pytest.raises(BadInputError) as err:
        fleet_keys.load_or_create(first, tmp_path / "fl", {"a": tmp_path / "fl-a", "b": tmp_path / "fl-b"})
    assert "group b has an API key of its own" in str(err.value) and str(own) in err.value.hint


class FakeReport:
    def __init__(self, code: int):
        self.code = code

    def exit_code(self) -> int:
        return self.code


class FakeHost:
    def __init__(self, calls, gone):
        self.calls, self.gone = calls, gone

    def look(self):
        if self.gone:
            raise UnreachableError("node0", "connect timed out", step="router")
        return SimpleNamespace(container=object())


class FakeRouter:
    calls: list = []
    gone = False

    def __init__(self, fleet_, keys, accept=False):
        self.groups = [reg.GroupEndpoint(g.name, svc.worker_url(g.inventory)) for g in fleet_.groups]
        self.host = FakeHost(self.calls, self.gone)
        self.conn = SimpleNamespace(close=lambda: self.calls.append(("close",)))

    def deregister(self, group, check=False):
        self.calls.append(("deregister", group.name))
        return [f"router: removed group {group.name}"]

    def stop(self, check=False):
        self.calls.append(("stop",))
        return "router: stopped"

    def __enter__(self):
        return self

    def __exit__(self, *_):
        pass

    def ensure_running(self, check=False):
        self.calls.append(("ensure_running",))
        return ["router on node0: running"]

    def reconcile(self, verified, check=False):
        self.calls.append(("reconcile", sorted(verified)))
        return []

    def wait_ready(self, verified):
        self.calls.append(("wait_ready", sorted(verified)))

    def verify(self):
        self.calls.append(("verify",))
        return "router: a chat completion through it answered"


@pytest.fixture
def fleet_file(tmp_path, monkeypatch):
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(two_groups()))
    ran: list[tuple[str, int]] = []
    codes = {"fl-a": 0, "fl-b": 0}

    def run_steps(inv, steps, **kw):
        ran.append((inv.cluster, len(steps)))
        FakeRouter.calls.append(("run", inv.cluster, steps[-1].name))
        return FakeReport(codes[inv.cluster])

    FakeRouter.calls, FakeRouter.gone = [], False
    monkeypatch.setattr(fleet_run, "run_steps", run_steps)
    monkeypatch.setattr(fleet_run, "FleetRouter", FakeRouter)
    return path, ran, codes


def test_up_brings_each_group_up_in_turn_then_registers_the_verified_ones(fleet_file, capsys):
    path, ran, codes = fleet_file
    codes["fl-b"] = 1
    assert test_cli.exit_code(["up", "-i", str(path)]) == 1
    assert [c for c, _ in ran] == ["fl-a", "fl-b"]
    assert [c for c in FakeRouter.calls if c[0] != "run"] == [
        ("ensure_running",), ("reconcile", ["a"]), ("wait_ready", ["a"]), ("verify",)]
    err = capsys.readouterr().err
    assert "group(s) b did not come up and are not registered with the router" in err
    assert (path.parent / ".k3deploy" / "fl" / "secrets" / "router-admin-key").exists()


def test_up_of_a_fleet_whose_groups_all_verify_exits_0(fleet_file, capsys):
    path, ran, _ = fleet_file
    assert test_cli.exit_code(["up", "-i", str(path)]) == 0
    assert ("reconcile", ["a", "b"]) in FakeRouter.calls
    assert "serving at http://10.0.0.10:30000/v1 (2 groups behind the router)" in \
        capsys.readouterr().err


def test_an_invalid_fleet_is_refused_before_any_run(tmp_path, monkeypatch, capsys):
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(two_groups(router={"port": 8000})))   # the serve port
    monkeypatch.setattr(fleet_run, "run_steps", lambda *a, **k: pytest.fail("ran"))
    assert test_cli.exit_code(["up", "-i", str(path)]) == 2
    assert test_cli.exit_code(["down", "-i", str(path)]) == 2


def test_down_takes_each_group_out_of_the_router_before_its_teardown_then_stops_it(fleet_file):
    path, _, _ = fleet_file
    assert test_cli.exit_code(["up", "-i", str(path)]) == 0   # the fleet's keys exist
    FakeRouter.calls = []
    assert test_cli.exit_code(["down", "-i", str(path)]) == 0
    assert FakeRouter.calls == [("deregister", "a"), ("run", "fl-a", "stop-peer-server"),
                                ("deregister", "b"), ("run", "fl-b", "stop-peer-server"),
                                ("stop",), ("close",)]


def test_down_with_the_routers_node_gone_tears_the_groups_down_and_says_so(fleet_file, capsys):
    path, _, _ = fleet_file
    assert test_cli.exit_code(["up", "-i", str(path)]) == 0
    FakeRouter.calls, FakeRouter.gone = [], True
    assert test_cli.exit_code(["down", "-i", str(path)]) == 3
    assert [c for c in FakeRouter.calls if c[0] == "run"] == [
        ("run", "fl-a", "stop-peer-server"), ("run", "fl-b", "stop-peer-server")]
    assert "router node node0 could not be reached" in capsys.readouterr().err


def test_down_of_a_fleet_never_brought_up_runs_the_groups_teardown_only(fleet_file):
    path, ran, _ = fleet_file
    assert test_cli.exit_code(["down", "-i", str(path)]) == 0
    assert [c for c, _ in ran] == ["fl-a", "fl-b"]
    assert not (path.parent / ".k3deploy" / "fl" / "secrets").exists()

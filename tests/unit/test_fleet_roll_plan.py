"""`roll` on a fleet without nodes: the refusal of a one-group fleet, the order groups are
rolled in, the drain decision, and the roll's sequence against a fake router (each group out,
drained, its engines stopped and brought up by the one-group machinery, registered, ready;
then the next), a failed relaunch and a Ctrl-C naming where every group stands."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import yaml

from k3deploy.cluster import fleet_registry as reg, router_service as svc
from k3deploy.core.errors import Interrupted, StepFailed
from k3deploy.run import fleet_roll as roll, fleet_run
from tests.unit import test_cli
from tests.unit.fleetdata import group, two_groups

A = reg.GroupEndpoint("a", "http://10.0.0.10:8000")
B = reg.GroupEndpoint("b", "http://10.0.0.12:8000")


def worker(wid: str, url: str, status: str = "ready") -> dict:
    return {"id": wid, "url": url, "status": status}


# -- pure ----------------------------------------------------------------------------------
def test_a_one_group_fleet_is_refused_unless_an_outage_is_allowed():
    err = roll.refusal(1, False, "f.yaml")
    assert err is not None and err.exit_code == 2
    assert "a fleet of one group cannot roll without an outage" in str(err)
    assert "--allow-outage" in (err.hint or "")
    assert roll.refusal(1, True, "f.yaml") is None and roll.refusal(2, False, "f.yaml") is None


def test_groups_not_ready_roll_first_then_the_serving_ones_in_fleet_order():
    assert roll.order(["a", "b", "c"], {"a", "b", "c"}) == ["a", "b", "c"]
    assert roll.order(["a", "b", "c"], {"a", "c"}) == ["b", "a", "c"]
    assert roll.order(["a", "b"], set()) == ["a", "b"]


def test_which_groups_the_router_holds_and_reports_ready():
    workers = [worker("w1", A.url + "/", "pending"), worker("w2", B.url, "draining")]
    assert roll.groups_where(workers, [A, B], ready_only=False) == {"a"}
    assert roll.groups_where(workers, [A, B], ready_only=True) == set()
    ready = [worker("w1", A.url), worker("w2", B.url)]
    assert roll.groups_where(ready, [A, B], ready_only=True) == {"a", "b"}
    assert roll.listed(workers, B) and not roll.listed(ready[:1], B)


@pytest.mark.parametrize("in_router, load, waited, verdict", [
    (True, None, 3.0, roll.WAIT),        # its DELETE still settling (SMG: draining)
    (False, 2, 8.0, roll.WAIT),          # two requests still running on its engine
    (False, 0, 6.0, roll.DRAINED),
    (False, None, 6.0, roll.WAIT),       # an engine without /v1/loads: a grace first
    (False, None, roll.UNKNOWN_LOAD_GRACE, roll.DRAINED),
    (False, 3, 120.0, roll.DEADLINE),
    (True, None, 120.0, roll.DEADLINE),
])
def test_the_drain_waits_for_the_router_to_let_go_then_for_the_engine_to_be_idle(
        in_router, load, waited, verdict):
    assert roll.drain_verdict(in_router, load, waited, timeout=120.0) == verdict


def test_the_lines_name_where_each_group_stands():
    assert roll.left_line("a", None, "f.yaml") == "group a: serving, in the router"
    assert "(relaunched)" in roll.left_line("a", roll.DONE, "f.yaml")
    assert "out of the router (draining or drained), its engines still running; `k3deploy " \
        "up -i f.yaml` registers it again" in roll.left_line("a", roll.OUT, "f.yaml")
    assert "relaunch stopped half-way" in roll.left_line("a", roll.STOPPING, "f.yaml")
    assert "registered with the router" in roll.left_line("a", roll.REGISTERING, "f.yaml")
    assert "still 3 request(s) in flight after 120s" in \
        roll.drain_line("a", roll.DEADLINE, 3, 120.0)
    assert roll.drain_line("a", roll.DRAINED, 0, 9.2, seen=2) == \
        "group a: drained (2 request(s) in flight finished, 9s after its removal)"


# -- the roll against a fake router --------------------------------------------------------
class FakeHost:
    def __init__(self, router):
        self.router, self.node = router, "node0"

    def look(self):
        return SimpleNamespace(container=SimpleNamespace(running=self.router.running))

    def workers(self, _admin):
        return [worker(f"w-{url[-10:]}", url, status) for url, status in self.router.status.items()]

    def admin(self, _admin, op, **cfg):
        assert op == "load" and cfg["api_key"] == self.router.keys.serving
        self.router.calls.append(("load", cfg["url"]))
        return {"load": 0}


class FakeRouter:
    calls: list = []
    running = True

    def __init__(self, fleet_, keys, accept=False):
        self.keys, self.where = keys, "router on node0"
        self.groups = [reg.GroupEndpoint(g.name, svc.worker_url(g.inventory)) for g in fleet_.groups]
        self.status = {g.url: "ready" for g in self.groups}
        self.host = FakeHost(self)

    def __enter__(self):
        return self

    def __exit__(self, *_):
        pass

    def ensure_running(self, check=False):
        return ["router on node0: running"]

    def deregister(self, group, check=False):
        self.calls.append(("deregister", group.name))
        self.status.pop(group.url)
        return [f"router: removed group {group.name}"]

    def reconcile(self, verified, check=False):
        self.calls.append(("reconcile", sorted(verified)))
        for g in self.groups:
            if g.name in verified:
                self.status[g.url] = "ready"
        return []

    def wait_ready(self, verified):
        self.calls.append(("wait_ready", sorted(verified)))

    def verify(self):
        self.calls.append(("verify",))
        return "router: a chat completion through it answered"


@pytest.fixture
def rolled(tmp_path, monkeypatch):
    """A two-group fleet brought up (its keys exist), run_steps and the router faked."""
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(two_groups()))
    codes: dict[tuple[str, str], object] = {}

    def run_steps(inv, steps, **kw):
        last = steps[-1].name
        FakeRouter.calls.append(("run", inv.cluster, last, kw["options"].get("no_dry_fire")))
        outcome = codes.get((inv.cluster, last), 0)
        if isinstance(outcome, BaseException):
            raise outcome
        return SimpleNamespace(exit_code=lambda: outcome)

    monkeypatch.setattr(fleet_run, "run_steps", run_steps)
    monkeypatch.setattr(fleet_run, "FleetRouter", FakeRouter)
    monkeypatch.setattr(roll, "FleetRouter", FakeRouter)
    monkeypatch.setattr(roll, "POLL", 0.01)
    FakeRouter.calls, FakeRouter.running = [], True
    assert test_cli.exit_code(["up", "-i", str(path)]) == 0
    FakeRouter.calls = []
    return path, codes


def test_roll_takes_each_group_out_drains_relaunches_and_registers_it_before_the_next(
        rolled, capsys):
    path, _ = rolled
    assert test_cli.exit_code(["roll", "-i", str(path)]) == 0
    each = [("deregister", "{g}"), ("load", "{url}"), ("run", "fl-{g}", "teardown", None),
            ("run", "fl-{g}", "guard", True)]
    expected = []
    for g, url in (("a", A.url), ("b", B.url)):
        expected += [tuple(x.format(g=g, url=url) if isinstance(x, str) else x for x in c)
                     for c in each]
        expected += [("reconcile", ["a", "b"]), ("wait_ready", [g])]
    assert FakeRouter.calls == expected + [("verify",)]
    err = capsys.readouterr().err
    assert "roll a, b, one at a time (ready in the router now: a, b)" in err
    assert "group a: drained (no request in flight" in err
    assert "rolled 2 group(s); serving at http://10.0.0.10:30000/v1" in err


def test_roll_check_plans_and_changes_nothing(rolled, capsys):
    path, _ = rolled
    assert test_cli.exit_code(["roll", "-i", str(path), "--check"]) == 0
    assert FakeRouter.calls == []
    assert "would take each out of the router, drain it (at most 300s)" in capsys.readouterr().err


def test_a_failed_relaunch_stops_the_roll_naming_the_group_and_the_fix(rolled, capsys):
    path, codes = rolled
    codes[("fl-a", "guard")] = 1
    assert test_cli.exit_code(["roll", "-i", str(path)]) == 1
    assert ("deregister", "b") not in FakeRouter.calls
    assert not any(c[0] == "reconcile" for c in FakeRouter.calls)
    err = capsys.readouterr().err
    assert "group a did not come back from its relaunch" in err
    assert "group a: out of the router, its relaunch stopped half-way; `k3deploy up -i" in err
    assert "group b: serving, in the router" in err


def test_ctrl_c_during_a_relaunch_names_where_every_group_stands(rolled, capsys):
    path, codes = rolled
    codes[("fl-b", "guard")] = Interrupted(2, ["b's run: interrupted in launch"])
    assert test_cli.exit_code(["roll", "-i", str(path)]) == 130
    err = capsys.readouterr().err
    assert "interrupted by SIGINT" in err and "b's run: interrupted in launch" in err
    assert "group a: serving, in the router (relaunched)" in err
    assert "group b: out of the router, its relaunch stopped half-way" in err


def test_the_only_ready_group_is_not_taken_out_without_allow_outage():
    router = SimpleNamespace(groups=[A, B], keys=SimpleNamespace(admin="adm", serving="k"),
                             calls=[], status={A.url: "ready", B.url: "not_ready"})
    router.host = FakeHost(router)
    router.deregister = lambda g: router.calls.append(("deregister", g.name)) or \
        router.status.pop(g.url) and []
    run = SimpleNamespace(fleet=SimpleNamespace(source="f.yaml"), say=lambda line: None)
    with pytest.raises(StepFailed) as err:
        roll.FleetRoll(run, router, None, roll.RollOptions()).take_out(A)
    assert "no group but a is ready in the router: taking it out would take the endpoint " \
        "down" in str(err.value) and "--allow-outage" in err.value.hint
    assert router.calls == []
    roll.FleetRoll(run, router, None, roll.RollOptions(allow_outage=True)).take_out(A)
    roll.FleetRoll(run, router, None, roll.RollOptions()).take_out(B)   # not ready: no loss
    assert [c for c in router.calls if c[0] == "deregister"] == [("deregister", "a"),
                                                                 ("deregister", "b")]


def test_roll_refuses_a_one_group_fleet_and_a_one_group_inventory_before_any_ssh(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(fleet_run, "run_steps", lambda *a, **k: pytest.fail("ran"))
    monkeypatch.setattr(roll, "FleetRouter", lambda *a, **k: pytest.fail("router"))
    one = tmp_path / "one.yaml"
    one.write_text(yaml.safe_dump(two_groups(groups=[group("a", 0)])))
    assert test_cli.exit_code(["roll", "-i", str(one)]) == 2
    assert "a fleet of one group cannot roll without an outage" in capsys.readouterr().err
    plain = {k: v for k, v in two_groups().items() if k not in ("groups", "router")}
    single = tmp_path / "single.yaml"
    single.write_text(yaml.safe_dump({**plain, "nodes": group("a", 0)["nodes"]}))
    assert test_cli.exit_code(["roll", "-i", str(single)]) == 2
    assert "is one group, not a fleet" in capsys.readouterr().err


def test_ctrl_c_between_two_groups_leaves_both_serving_and_says_so(rolled, monkeypatch, capsys):
    path, _ = rolled
    checks = []

    def check():
        checks.append(1)
        if len(checks) == 2:     # before the second group
            raise Interrupted(2)

    real = roll.interrupt
    monkeypatch.setattr(roll, "interrupt", SimpleNamespace(handling=real.handling,
                                                           sleep=real.sleep, check=check))
    assert test_cli.exit_code(["roll", "-i", str(path)]) == 130
    assert ("deregister", "b") not in FakeRouter.calls
    err = capsys.readouterr().err
    assert "group a: serving, in the router (relaunched)" in err
    assert "group b: serving, in the router" in err


def test_roll_passes_log_json_to_each_groups_run(rolled, monkeypatch):
    path, _ = rolled
    fake, seen = fleet_run.run_steps, []
    monkeypatch.setattr(fleet_run, "run_steps",
                        lambda inv, steps, **kw: seen.append(kw["log_json"]) or fake(inv, steps, **kw))
    assert test_cli.exit_code(["roll", "-i", str(path), "--log-json"]) == 0
    assert seen == [True] * 4


def test_an_engines_load_is_its_running_and_waiting_requests_over_its_dp_ranks():
    import http.server
    import json
    import threading

    from k3deploy.remote import router_admin

    answers = {"/v1/loads?include=core": (200, {"loads": [
        {"dp_rank": 0, "num_running_reqs": 2, "num_waiting_reqs": 1},
        {"dp_rank": 1, "num_running_reqs": 3, "num_waiting_reqs": 0}]})}
    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):   # noqa: N802 (http.server's name)
            seen.append(self.headers.get("Authorization"))
            status, body = answers.get(self.path, (404, {"detail": "Not Found"}))
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *_):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        assert router_admin.engine_load(url, "k3-key") == 6
        assert seen == ["Bearer k3-key"]
        answers.clear()   # an older SGLang: no /v1/loads
        assert router_admin.engine_load(url, None) is None
    finally:
        server.shutdown()

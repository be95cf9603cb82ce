"""A fleet's group leaves the router before its guard stops its ranks (issue 54): the guard's
router link (config, files, digest), what the guard removes and in which order, the fleet's run
handing the link to the guard step, and `watch` on a fleet. No I/O beyond tmp_path."""

from __future__ import annotations

import json

import pytest
import yaml

from k3deploy.cli import fleet_watch, watch_cmd
from k3deploy.cluster import fleet, inventory
from k3deploy.cluster import fleet_registry as reg
from k3deploy.node import guard_config
from k3deploy.remote import guard as node_guard   # puts the guard's dir on sys.path
from k3deploy.steps.guard import StartGuard
from tests.unit import test_cli
from tests.unit.fleetdata import two_groups
from tests.unit.invdata import four_nodes
from tests.unit.test_fleet_run import fleet_file   # noqa: F401 (a fixture)
from tests.unit.test_guard_logic import SECRET, facts, node_ctx

import guard_router   # noqa: E402 (the guard's own import, by bare name)

ADMIN = "admin-key-0123456789abcdef"
LINK = guard_config.RouterLink("http://10.0.0.10:30000", "http://10.0.0.12:8000", ADMIN)


# -- what the guard removes -----------------------------------------------------------------
def test_the_groups_entries_are_found_by_url_and_a_draining_one_is_left():
    workers = [{"id": "w1", "url": "http://10.0.0.12:8000/", "status": "ready"},
               {"id": "w2", "url": "http://10.0.0.10:8000", "status": "ready"},
               {"id": "w3", "url": "http://10.0.0.12:8000", "status": "draining"},
               {"id": "w4", "url": "http://10.0.0.12:8000", "status": "not_ready"}]
    assert guard_router.entries(workers, "http://10.0.0.12:8000") == ["w1", "w4"]


class FakeAdmin:
    def __init__(self, workers, fail=None):
        self.listed, self.fail, self.removed = workers, fail, []

    def workers(self):
        if self.fail:
            raise self.fail
        return self.listed

    def remove(self, wid):
        self.removed.append(wid)
        return wid != "gone"   # 404: another guard of the group was first


def link_doc() -> dict:
    return {"base": LINK.base, "worker": LINK.worker, "key_file": "/nonexistent"}


def test_leave_removes_the_groups_worker_and_says_so_without_the_key():
    admin = FakeAdmin([{"id": "w1", "url": LINK.worker, "status": "ready"},
                       {"id": "w2", "url": "http://10.0.0.10:8000", "status": "ready"}])
    said = guard_router.leave(link_doc(), admin)
    assert admin.removed == ["w1"]
    assert said == f"router: removed {LINK.worker} (worker w1)" and ADMIN not in said


def test_leave_when_another_guard_was_first_or_the_router_is_out_of_reach():
    assert guard_router.leave(link_doc(), FakeAdmin([])) == \
        f"router: {LINK.worker} was not routed to already"
    assert "was not routed to already" in guard_router.leave(
        link_doc(), FakeAdmin([{"id": "gone", "url": LINK.worker, "status": "ready"}]))
    err = guard_router.RouterAdminError("GET", "/workers", None, "timed out")
    assert guard_router.leave(link_doc(), FakeAdmin([], fail=err)).startswith(
        f"router: could not remove {LINK.worker}: router GET /workers: no answer")
    # no key file on the node: said, and the ranks are stopped all the same
    assert "could not remove" in guard_router.leave(link_doc())


def test_the_key_is_read_from_its_file(tmp_path):
    (tmp_path / "key").write_text(ADMIN + "\n")
    assert guard_router.read_key(str(tmp_path / "key")) == ADMIN


def test_the_guard_leaves_the_router_before_it_stops_its_engine(tmp_path, monkeypatch):
    inv = inventory.parse(four_nodes())
    cfg = guard_config.with_digest(guard_config.config(inv, inv.ranked()[1][1].name, LINK),
                                   SECRET, LINK)
    cfg["dir"] = str(tmp_path)
    g = node_guard.Guard(cfg, SECRET)
    g.engine.update({"id": "c0ffee"})
    order: list[str] = []
    monkeypatch.setattr(guard_router, "leave",
                        lambda link: order.append(f"leave {link['worker']}") or "router: removed")
    monkeypatch.setattr(g, "stop_engine", lambda: order.append("stop") or "stopped")
    g.fire({"failure": {"cause": "rank 1 (n1): unreachable"}, "seen_by": "n0"})
    assert order == [f"leave {LINK.worker}", "stop"]
    record = json.loads((tmp_path / "incident.json").read_text())
    assert record["router"] == "router: removed" and record["local_engine"] == "stopped"
    assert ADMIN not in (tmp_path / "guard.log").read_text() + json.dumps(record)


def test_a_one_group_guard_has_no_router_to_leave(tmp_path, monkeypatch):
    inv = inventory.parse(four_nodes())
    cfg = guard_config.with_digest(guard_config.config(inv, inv.head.name), SECRET)
    cfg["dir"] = str(tmp_path)
    g = node_guard.Guard(cfg, SECRET)
    monkeypatch.setattr(guard_router, "leave", lambda link: pytest.fail("no router"))
    assert g.leave_router() == {}


# -- the guard's config, files and digest ---------------------------------------------------
def test_a_one_group_config_is_as_before_and_a_fleets_names_its_router():
    inv = inventory.parse(four_nodes())
    plain = guard_config.config(inv, inv.head.name)
    assert "router" not in plain and guard_config.scripts(plain) == guard_config.SCRIPTS
    linked = guard_config.config(inv, inv.head.name, LINK)
    assert {k: v for k, v in linked.items() if k != "router"} == plain
    assert linked["router"] == {"base": LINK.base, "worker": LINK.worker,
                                "key_file": "/mnt/nvme/.k3deploy/guard/router-admin-key"}
    assert set(guard_config.ROUTER_SCRIPTS) <= set(guard_config.scripts(linked))
    assert ADMIN not in json.dumps(guard_config.with_digest(linked, SECRET, LINK))
    assert ADMIN not in repr(LINK)


def test_a_new_admin_key_replaces_the_guards():
    inv = inventory.parse(four_nodes())
    cfg = guard_config.config(inv, inv.head.name, LINK)
    other = guard_config.RouterLink(LINK.base, LINK.worker, "another-key")
    assert guard_config.with_digest(cfg, SECRET, LINK)["digest"] != \
        guard_config.with_digest(cfg, SECRET, other)["digest"]


def test_the_link_is_the_routers_private_address_and_the_groups_head():
    f = fleet.parse(two_groups(), "fleet.yaml")
    link = guard_config.router_link(f, "b", ADMIN)
    assert (link.base, link.worker) == ("http://10.0.0.10:30000", "http://10.0.0.12:8000")


def test_the_guard_step_writes_the_admin_key_0600_only_for_a_fleets_group(tmp_path):
    linked = node_ctx(tmp_path, options={guard_config.ROUTER_OPTION: LINK})
    actions = StartGuard().plan(facts([], "x"), linked)
    keys = [(a.upload_to, a.mode) for a in actions if a.content and ADMIN in a.content]
    assert keys == [("/mnt/nvme/.k3deploy/guard/router-admin-key", 0o600)]
    uploaded = {a.upload_to.rsplit("/", 1)[-1] for a in actions if a.upload_to}
    assert set(guard_config.ROUTER_SCRIPTS) <= uploaded
    assert all(ADMIN not in a.shown() for a in actions)
    plain = StartGuard().plan(facts([], "x"), node_ctx(tmp_path / "one"))
    assert not {a.upload_to for a in plain if a.upload_to} & {
        "/mnt/nvme/.k3deploy/guard/router-admin-key",
        *(f"/mnt/nvme/.k3deploy/guard/{s}" for s in guard_config.ROUTER_SCRIPTS)}


# -- the fleet's run hands the link over ----------------------------------------------------
def test_every_group_run_of_a_fleet_gets_its_router_link(fleet_file, monkeypatch):  # noqa: F811
    path, _, _ = fleet_file
    from k3deploy.run import fleet_run
    seen: dict[str, object] = {}
    inner = fleet_run.run_steps

    def run_steps(inv, steps, **kw):
        seen[inv.cluster] = kw["options"].get(guard_config.ROUTER_OPTION)
        return inner(inv, steps, **kw)

    monkeypatch.setattr(fleet_run, "run_steps", run_steps)
    assert test_cli.exit_code(["up", "-i", str(path)]) == 0
    admin = (path.parent / ".k3deploy" / "fl" / "secrets" / "router-admin-key").read_text().strip()
    assert seen == {"fl-a": guard_config.RouterLink("http://10.0.0.10:30000",
                                                    "http://10.0.0.10:8000", admin),
                    "fl-b": guard_config.RouterLink("http://10.0.0.10:30000",
                                                    "http://10.0.0.12:8000", admin)}


# -- watch on a fleet -----------------------------------------------------------------------
def group_doc(name: str, state: str, incident: dict | None = None) -> dict:
    return {"cluster": {"name": name, "state": state, "incident": incident,
                        **({"since": "12:00:00"} if incident else {})}, "nodes": {}}


def fleet_doc(groups: dict, state: str = "serving", why: str = "the router reports every group "
              "ready (a, b)") -> dict:
    return {"fleet": {"name": "fl", "state": state, "why": why, "groups": {}},
            "router": {}, "groups": groups}


def test_watch_acts_on_the_group_its_guard_stopped_and_shows_the_fleet_otherwise():
    incident = {"failure": {"cause": "rank 1 (node3): unreachable", "at": "t", "node": "node3",
                            "kind": "unreachable"}, "seen_by": "node2"}
    seen, line = fleet_watch.watched(fleet_doc(
        {"a": group_doc("fl-a", "serving"), "b": group_doc("fl-b", "stopped-by-guard", incident)},
        "degraded", "the router reports 1 of 2 groups ready (a)"))
    assert seen["state"] == "stopped-by-guard" and seen["incident"] is incident
    assert line.startswith("fleet fl: group b: cluster fl-b: stopped by the guard since 12:00:00")
    seen, line = fleet_watch.watched(fleet_doc({"a": group_doc("fl-a", "serving"),
                                                "b": group_doc("fl-b", "serving")}))
    assert (seen["state"], seen["incident"]) == ("serving", None)
    assert line == "fleet fl: serving: the router reports every group ready (a, b)"


def test_watch_restart_on_a_fleet_runs_the_fleets_up_once(tmp_path, monkeypatch):
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(two_groups()))
    incident = {"failure": {"cause": "c", "at": "t", "node": "node3", "kind": "exited"}}
    looks = iter([(group_doc("fl-b", "stopped-by-guard", incident)["cluster"], "b stopped", None),
                  ({"name": "fl", "state": "serving", "incident": None, "error": ""}, "ok", None)])
    lines: list[str] = []
    monkeypatch.setattr(watch_cmd.interrupt, "sleep", lambda s: None)
    monkeypatch.setattr(watch_cmd, "say", lines.append)
    monkeypatch.setattr(fleet_watch, "observe", lambda *a: next(looks))
    ups: list[str] = []
    monkeypatch.setattr(fleet_watch, "bring_up",
                        lambda f, *a: ups.append(f.cluster) or (0, "bring-up verified"))
    w = watch_cmd.FleetWatch(fleet.parse(two_groups(), str(path)), 1, 1.0)
    with pytest.raises(StopIteration):
        w.run()
    assert ups == ["fl"]
    assert lines[:4] == ["b stopped", "restart 1 of 1 in 10s", "bring-up verified", "ok"]


def test_watch_takes_a_fleet_and_checks_each_groups_key_files(tmp_path):
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(two_groups()))
    watch_cmd.refuse_bad_input(str(path))   # no exit 2: a fleet is watched


def test_up_waits_for_a_router_dockers_restart_policy_brought_back(monkeypatch):
    """Its process killed by hand, docker starts it again (--restart unless-stopped): running,
    but its admin API answers a moment later; `up` registers the groups once it does."""
    from k3deploy.core.errors import StepFailed
    from k3deploy.node.fleet_keys import FleetKeys
    from k3deploy.run import fleet_router
    calls: list[str] = []

    class Host:
        node = "node0"

        def workers(self, key):
            calls.append("workers")
            if len(calls) == 1:
                raise StepFailed("node0", "the router's admin API (workers): connection refused")
            return []

        def admin(self, key, op, **cfg):
            calls.append(op)
            return {}

    monkeypatch.setattr(fleet_router.interrupt, "sleep", lambda s: None)
    router = object.__new__(fleet_router.FleetRouter)
    router.host, router.keys = Host(), FleetKeys("serving-key", ADMIN)
    router.groups = [reg.GroupEndpoint("a", "http://10.0.0.10:8000")]
    assert router.reconcile({"a"}) == ["router: register group a (http://10.0.0.10:8000)"]
    assert calls == ["workers", "workers", "reconcile"]

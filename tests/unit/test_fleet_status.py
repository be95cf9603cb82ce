"""`status -i FLEET`: the verdict, the document and the exit code from fixture facts
(cli/fleet_status_doc.py), and the command's output with the looks replaced (cli/fleet_cmd.py)."""

from __future__ import annotations

import json

import yaml

from k3deploy.cli import fleet_cmd, fleet_status
from k3deploy.cli import fleet_status_doc as fdoc
from k3deploy.cluster.fleet_registry import GroupEndpoint

from fleetdata import two_groups

GROUPS = [GroupEndpoint("a", "http://10.0.0.10:8000"), GroupEndpoint("b", "http://10.0.0.12:8000")]
RUNNING = {"id": "c1", "status": "running", "running": True}


def worker(url: str, status: str = "ready", healthy: bool = True, wid: str = "") -> dict:
    return {"id": wid or url[-9:], "url": url, "status": status, "is_healthy": healthy}


def look(workers=None, *, container=RUNNING, reachable=True, error=None) -> fdoc.RouterLook:
    return {"reachable": reachable, "error": error, "container": container, "workers": workers}


def group_doc(state: str = "serving", reachable: bool = True) -> dict:
    return {"cluster": {"name": "x", "state": state, "incident": None},
            "nodes": {"n": {"rank": 0, "live": {"reachable": reachable}, "state": {},
                            "replaced": False, "torn_down": None}},
            "fabric": None, "run_active": False, "cost": None}


def doc(router_look: fdoc.RouterLook, a="serving", b="serving", b_reachable=True):
    router = fdoc.router_doc("node0", "http://10.0.0.10:30000/v1", GROUPS, router_look)
    return fdoc.document("fl", router, {"a": group_doc(a), "b": group_doc(b, b_reachable)})


BOTH = [worker(GROUPS[0].url), worker(GROUPS[1].url + "/")]   # a trailing slash: the same URL


def test_both_groups_ready_behind_a_running_router_serve():
    d = doc(look(BOTH))
    assert d["fleet"]["state"] == "serving"
    assert {g: v["ready"] for g, v in d["fleet"]["groups"].items()} == {"a": True, "b": True}
    assert [w["group"] for w in d["router"]["workers"]] == ["a", "b"]
    assert d["router"]["running"] and d["router"]["workers"][0]["healthy"] is True
    assert fdoc.exit_code(d) == 0
    text = fdoc.lines(d)
    assert text[0] == "fleet fl: serving: the router reports every group ready (a, b)"
    # no `load` in these entries (an SMG that does not say): nothing counted for them
    assert "router on node0 (http://10.0.0.10:30000/v1): running, 2 worker(s), 0 request(s) " \
        "in flight" in text
    assert "  group a: ready, healthy (http://10.0.0.10:8000)" in text


def test_the_routers_requests_in_flight_per_group_and_in_all():
    d = doc(look([{**BOTH[0], "load": 3}, {**BOTH[1], "load": 1}]))
    assert [w["in_flight"] for w in d["router"]["workers"]] == [3, 1]
    text = fdoc.lines(d)
    assert "router on node0 (http://10.0.0.10:30000/v1): running, 2 worker(s), 4 request(s) " \
        "in flight" in text
    assert "  group a: ready, healthy, 3 in flight (http://10.0.0.10:8000)" in text


def test_one_group_out_of_the_router_is_degraded_and_names_why():
    d = doc(look([BOTH[0]]))
    assert d["fleet"]["state"] == "degraded"
    assert d["fleet"]["groups"]["b"] == {"ready": False, "why": "not registered with the router"}
    assert fdoc.exit_code(d) == 1
    assert "  group b: not registered with the router" in fdoc.lines(d)


def test_a_group_the_router_does_not_report_ready_is_not_counted():
    d = doc(look([BOTH[0], worker(GROUPS[1].url, "not_ready", False)]))
    assert d["fleet"]["state"] == "degraded"
    assert d["fleet"]["groups"]["b"]["why"] == "the router reports it not_ready"
    assert [line for line in fdoc.lines(d) if line.startswith("  group b")] == \
        ["  group b: not_ready, unhealthy (http://10.0.0.12:8000)"]   # said once


def test_ready_at_the_router_but_stopped_by_its_guard_is_not_counted():
    d = doc(look(BOTH), b="stopped-by-guard")
    assert d["fleet"]["state"] == "degraded"
    assert "its own status: stopped-by-guard" in d["fleet"]["groups"]["b"]["why"]
    assert "  group b: the router reports it ready, its own status: stopped-by-guard" \
        in fdoc.lines(d)


def test_a_node_of_a_group_out_of_reach_leaves_the_routers_word_and_is_partial():
    d = doc(look(BOTH), b="unreachable", b_reachable=False)
    assert d["fleet"]["state"] == "serving"
    assert fdoc.exit_code(d) == 3


def test_no_group_ready_or_no_router_is_down():
    assert doc(look([]))["fleet"]["state"] == "down"
    stopped = doc(look(None, container={"id": "c1", "status": "exited", "running": False}),
                  a="down", b="down")
    assert stopped["fleet"]["state"] == "down"
    assert stopped["fleet"]["why"] == "the router is not running on node0"
    assert fdoc.exit_code(stopped) == 1
    assert "router on node0 (http://10.0.0.10:30000/v1): not running (container: exited)" \
        in fdoc.lines(stopped)
    gone = doc(look(None, container=None), a="down", b="down")
    assert gone["fleet"]["state"] == "down" and gone["router"]["container"] is None
    assert "not running (container: none)" in fdoc.lines(gone)[1]


def test_the_routers_node_out_of_reach_is_unknown_and_partial():
    d = doc(look(None, container=None, reachable=False, error="ssh: timed out"))
    assert d["fleet"]["state"] == "unknown"
    assert "node0 could not be reached: ssh: timed out" in d["fleet"]["why"]
    assert fdoc.exit_code(d) == 3
    assert fdoc.lines(d)[1].endswith(": unreachable")


def test_an_admin_api_that_does_not_answer_is_unknown_not_partial():
    d = doc(look(None, error="the router's admin API (workers): 401"))
    assert d["fleet"]["state"] == "unknown"
    assert fdoc.exit_code(d) == 1


def test_a_worker_of_no_group_is_shown_and_does_not_count():
    d = doc(look([*BOTH, worker("http://10.9.9.9:8000", wid="old")]))
    assert d["fleet"]["state"] == "serving"
    assert "  no group of this fleet: ready, healthy (http://10.9.9.9:8000)" in fdoc.lines(d)


def _fleet_file(tmp_path) -> str:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(two_groups()))
    return str(path)


def test_status_of_a_fleet_prints_one_document_and_exits_as_its_verdict(tmp_path, monkeypatch,
                                                                        capsys):
    looked = doc(look([BOTH[0]]))
    monkeypatch.setattr(fleet_status, "collect", lambda fleet, accept, state_dir: looked)
    code = fleet_cmd.run_status(_fleet_file(tmp_path), json_out=True, accept_new_host_keys=False,
                                state_dir=None)
    printed = json.loads(capsys.readouterr().out)
    assert code == 1
    assert set(printed) == {"fleet", "router", "groups"}
    assert printed["fleet"]["state"] == "degraded" and set(printed["groups"]) == {"a", "b"}


def test_status_of_a_fleet_in_text_shows_the_router_then_each_group(tmp_path, monkeypatch,
                                                                    capsys):
    looked = doc(look(BOTH))
    monkeypatch.setattr(fleet_status, "collect", lambda fleet, accept, state_dir: looked)
    code = fleet_cmd.run_status(_fleet_file(tmp_path), json_out=False, accept_new_host_keys=False,
                                state_dir=None)
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith("fleet fl: serving")
    assert out.index("router on node0") < out.index("group a:") < out.index("group b:")

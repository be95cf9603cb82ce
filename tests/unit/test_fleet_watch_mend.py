"""A watch tick mends the router (cli/fleet_watch.mend): its worker list made the groups that
serve, as `up` makes it, and left alone while another run holds the fleet."""

from __future__ import annotations

from k3deploy.cli import fleet_watch
from k3deploy.cluster import fleet
from k3deploy.core.state import ClusterLock, state_dir_for
from k3deploy.run import fleet_router
from tests.unit.fleetdata import fleet_on_disk, two_groups


def doc(states: dict[str, str], workers: list[tuple[str | None, str]] | None,
        running: bool = True, reachable: bool = True) -> dict:
    return {"fleet": {"name": "fl", "state": "serving", "why": "", "groups": {}},
            "router": {"node": "node0", "url": "u", "reachable": reachable, "running": running,
                       "error": None, "container": None,
                       "workers": None if workers is None else [
                           {"id": f"w{i}", "url": f"http://x{i}:8000", "group": g,
                            "status": st, "healthy": True} for i, (g, st) in enumerate(workers)]},
            "groups": {n: {"cluster": {"name": f"fl-{n}", "state": s}, "nodes": {}}
                       for n, s in states.items()}}


def test_the_router_is_out_of_step_when_its_workers_are_not_the_serving_groups():
    both = {"a": "serving", "b": "serving"}
    assert not fleet_watch.out_of_step(doc(both, [("a", "ready"), ("b", "pending")]))
    assert fleet_watch.out_of_step(doc(both, []))                        # restarted by hand
    assert fleet_watch.out_of_step(doc(both, None, running=False))       # not running at all
    assert fleet_watch.out_of_step(doc({"a": "serving", "b": "down"},    # b torn down alone
                                       [("a", "ready"), ("b", "ready")]))
    assert fleet_watch.out_of_step(doc(both, [("a", "ready"), ("b", "ready"), (None, "ready")]))
    # a group on its way out (a roll's, a guard's) is not held; nothing to compare: left alone
    assert not fleet_watch.out_of_step(doc({"a": "serving", "b": "stopped-by-guard"},
                                           [("a", "ready"), ("b", "draining")]))
    assert not fleet_watch.out_of_step(doc(both, None))                  # the admin API silent
    assert not fleet_watch.out_of_step(doc(both, [], reachable=False))


class Router:
    calls: list[tuple] = []

    def __init__(self, fleet, keys, accept):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def ensure_running(self, check=False):
        Router.calls.append(("ensure_running",))
        return ["router on node0: running"]

    def reconcile(self, verified, check=False):
        Router.calls.append(("reconcile", sorted(verified)))
        return ["router: register group b"]


def parsed(tmp_path):
    return fleet.parse(two_groups(), str(fleet_on_disk(tmp_path)))


def test_a_tick_registers_the_serving_groups_unless_a_run_holds_the_fleet(tmp_path, monkeypatch):
    monkeypatch.setattr(fleet_router, "FleetRouter", Router)
    Router.calls = []
    f = parsed(tmp_path)
    lagging = doc({"a": "serving", "b": "serving"}, [("a", "ready")])
    assert fleet_watch.mend(f, lagging, False, None) == \
        ["router on node0: running", "router: register group b"]
    assert Router.calls == [("ensure_running",), ("reconcile", ["a", "b"])]
    Router.calls = []
    with ClusterLock(state_dir_for(f.source, f.cluster, None)):   # a roll, an up
        assert fleet_watch.mend(f, lagging, False, None) == []
    in_step = doc({"a": "serving", "b": "serving"}, [("a", "ready"), ("b", "ready")])
    assert fleet_watch.mend(f, in_step, False, None) == []
    assert Router.calls == []

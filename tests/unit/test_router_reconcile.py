"""The fleet's reconcile: the router's worker list against the groups verified and serving.
Pure: lists in, a plan out (k3deploy/remote/router_reconcile.py)."""
from k3deploy.remote.router_reconcile import Plan, Serving, plan

NO_CHANGE = Plan([], [], [])
A, B, C = "http://10.0.0.1:30000", "http://10.0.1.1:30000", "http://10.0.2.1:30000"


def worker(wid, url, status="ready"):
    # the fields GET /workers gives that reconcile reads (smg 1.13.0, as tests/integration
    # test_fleet_router.py sees them), plus one it does not
    return {"id": wid, "url": url, "status": status, "is_healthy": status == "ready"}


def test_an_empty_router_gets_every_serving_group_with_its_key():
    p = plan([], [Serving(B, "kb"), Serving(A, "ka")])
    assert p.adds == [Serving(A, "ka"), Serving(B, "kb")] and p.removes == []


def test_a_router_that_matches_is_left_alone_whatever_the_health_short_of_failed():
    workers = [worker("1", A), worker("2", B, "not_ready"), worker("3", C, "pending")]
    p = plan(workers, [Serving(A, "ka"), Serving(B, "kb"), Serving(C, "kc")])
    assert p == NO_CHANGE


def test_a_group_no_longer_serving_is_removed_by_its_id():
    p = plan([worker("1", A), worker("2", B)], [Serving(A, "ka")])
    assert p.removes == ["2"] and p.adds == []


def test_a_failed_worker_is_terminal_so_it_is_removed_and_added_again():
    p = plan([worker("1", A, "failed"), worker("2", B)], [Serving(A, "ka"), Serving(B, "kb")])
    assert p.removes == ["1"] and p.adds == [Serving(A, "ka")]


def test_a_failed_worker_of_a_group_torn_down_is_only_removed():
    p = plan([worker("1", A, "failed")], [])
    assert p.removes == ["1"] and p.adds == []


def test_a_draining_worker_is_waited_for_not_deleted_twice_nor_added_over():
    p = plan([worker("1", A, "draining")], [Serving(A, "ka")])
    assert p.removes == [] and p.adds == [] and p.waits == [A]
    p = plan([worker("1", A, "draining")], [])
    assert p == NO_CHANGE


def test_duplicates_of_one_url_keep_one_live_entry():
    p = plan([worker("1", A, "failed"), worker("2", A), worker("3", A, "pending")],
             [Serving(A, "ka")])
    assert p.removes == ["1", "3"] and p.adds == []


def test_a_trailing_slash_is_the_same_worker():
    assert plan([worker("1", A + "/")], [Serving(A, "ka")]) == NO_CHANGE
    assert plan([worker("1", A)], [Serving(A + "/", "ka")]) == NO_CHANGE


def test_nothing_serving_and_nothing_registered_is_a_no_op():
    assert plan([], []) == NO_CHANGE

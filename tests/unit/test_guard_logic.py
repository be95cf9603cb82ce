"""The serve-time guard: its config, the guard step's plans, the guard's own decisions and the
cluster state `status` derives. Facts in, decisions out; no I/O."""

import dataclasses
import json
import re
import threading
import time
from pathlib import Path

import pytest

from k3deploy.cli import cluster_state
from k3deploy.node import guard_config
from k3deploy.cluster import inventory
from k3deploy.node.context import NodeContext, RunContext
from k3deploy.core.errors import InventoryError
from k3deploy.facts import http
from k3deploy.facts.guard import GuardState, Incident, parse_incident, parse_pids
from k3deploy.remote import guard as node_guard
from k3deploy.remote import guard_record
from k3deploy.steps import guard as guard_step
from k3deploy.steps.guard import GuardFacts, StartGuard, StopGuard, healthy
from tests.unit import typed
from tests.unit.fakes import FakeSession
from tests.unit.docker_facts import container
from tests.unit.invdata import four_nodes

SECRET = "guard-secret-value-0123456789"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "steps"


def node_ctx(tmp_path, rank=0, options=None, doc=None):
    inv = inventory.parse(doc or four_nodes())
    run = RunContext(inv=inv, session=FakeSession(inv, tmp_path), options=options or {})
    run.settle(guard_secret=SECRET)
    return NodeContext(run, inv.ranked()[rank][1], rank)


# -- config ---------------------------------------------------------------------------------
def test_config_names_the_peers_and_only_the_head_watches_the_serving_port():
    inv = inventory.parse(four_nodes())
    head, worker = inv.ranked()[0][1].name, inv.ranked()[2][1].name
    cfg = guard_config.config(inv, worker)
    assert cfg["rank"] == 2 and cfg["port"] == 8952 and cfg["peer_timeout"] == 20
    assert [p["node"] for p in cfg["peers"]] == [n.name for _, n in inv.ranked() if n.name != worker]
    assert cfg["bind"] == inv.node(worker).self_ip
    assert cfg["serve_port"] is None and guard_config.config(inv, head)["serve_port"] == inv.ports.serve
    assert SECRET not in str(guard_config.with_digest(cfg, SECRET))


def test_digest_follows_config_and_secret():
    inv = inventory.parse(four_nodes())
    cfg = guard_config.config(inv, inv.head.name)
    one = guard_config.with_digest(cfg, SECRET)["digest"]
    assert one == guard_config.with_digest(cfg, SECRET)["digest"]
    assert one != guard_config.with_digest({**cfg, "peer_timeout": 30}, SECRET)["digest"]
    assert one != guard_config.with_digest(cfg, SECRET + "x")["digest"]


def test_guard_port_may_not_collide():
    doc = four_nodes()
    doc["ports"] = {"guard": 8000}
    with pytest.raises(InventoryError) as err:
        inventory.parse(doc)
    assert err.value.problems == [
        "ports: 8000 is used for more than one purpose (ports.serve, ports.guard)"]


# -- the guard step ------------------------------------------------------------------------
def facts(pids, digest, phase="watching", beat_age=1.0, incident=None) -> GuardFacts:
    now = 1_000_000
    state = GuardState(pid=pids[0] if pids else 99, digest=digest, phase=phase,
                       beat=now - beat_age)
    return GuardFacts(guard_state=state, guard_pids=tuple(pids), now=now, incident=incident)


def an_incident() -> Incident:
    """An incident record as the guard writes it (guard_record), read as the step reads it."""
    inv = inventory.parse(four_nodes())
    cfg = guard_config.config(inv, inv.ranked()[2][1].name)
    doc = guard_record.incident(cfg, guard_record.failure(cfg["node"], 2, "exited",
                                                          exit_code=137), cfg["node"])
    found = parse_incident(json.dumps(doc), 0)
    assert found is not None and found.failure is not None
    return found


def test_a_healthy_guard_with_the_same_config_is_left_alone(tmp_path):
    node = node_ctx(tmp_path)
    digest = StartGuard().config(node)["digest"]
    assert StartGuard().plan(facts([41], digest), node) == []


def test_changed_config_spent_guard_or_stale_beat_is_replaced(tmp_path):
    node = node_ctx(tmp_path, rank=1)
    digest = StartGuard().config(node)["digest"]
    for found in (facts([41], "other"), facts([41], digest, phase="fired"),
                  facts([41], digest, beat_age=600), facts([41, 42], digest), facts([], digest)):
        assert not healthy(found, digest)
        actions = StartGuard().plan(found, node)
        assert actions[-1].description == "start the guard, detached"
        if found.guard_pids:
            assert actions[0].description.startswith("stop the guard (pid 41")


def test_a_misspelt_field_in_a_guard_fixture_fails():
    case = json.loads((FIXTURES / "guard-fired-with-incident.json").read_text())
    found = case["facts"]
    assert typed.facts(StartGuard, found).incident.failure.rank == 2
    incident = {("seenby" if k == "seen_by" else k): v for k, v in found["incident"].items()}
    with pytest.raises(TypeError, match="seenby"):
        typed.facts(StartGuard, {**found, "incident": incident})
    with pytest.raises(TypeError, match="guard_pid"):
        typed.facts(StopGuard, {**found, "guard_pid": found["guard_pids"]})


def test_restart_after_an_incident_archives_it_and_keeps_the_secret_off_argv(tmp_path):
    node = node_ctx(tmp_path)
    incident = an_incident()
    actions = StartGuard().plan(facts([41], "x", phase="fired", incident=incident), node)
    described = [a.description for a in actions]
    assert described.index("archive the incident record") < described.index(
        "start the guard, detached")
    # kept for the certificate: what stopped the group
    assert next(a.note for a in actions if a.tag == guard_step.RELAUNCHED_AFTER) is incident
    secret_writes = [a for a in actions if a.content and SECRET in a.content]
    assert [(a.upload_to, a.mode) for a in secret_writes] == [
        ("/mnt/nvme/.k3deploy/guard/secret", 0o600)]
    assert all(SECRET not in a.shown() for a in actions)


def test_disabled_guard_is_stopped_not_started(tmp_path):
    doc = four_nodes()
    doc["guard"] = {"enabled": False}
    node = node_ctx(tmp_path, doc=doc)
    assert [a.description for a in StartGuard().plan(facts([7], "x"), node)] == [
        "stop the guard (pid 7)"]
    assert StartGuard().plan(facts([], "x"), node) == []


def test_guard_stop_before_launch_stops_spent_guards_or_all_with_replace(tmp_path):
    found = facts([7], "x")
    step = StopGuard({"before_launch": True})
    assert step.plan(found, node_ctx(tmp_path)) == []
    assert len(step.plan(found, node_ctx(tmp_path, options={"replace": True}))) == 1
    # Seen in CI: a spent guard still alive after the relaunch served its old incident to a
    # new guard on another node, which adopted it and stopped the freshly verified group.
    spent = facts([7], "x", phase="fired", incident=an_incident())
    assert [a.description for a in step.plan(spent, node_ctx(tmp_path))] == [
        "stop the guard (pid 7)"]  # the incident stays on record until verify has passed
    down = StopGuard().plan(dataclasses.replace(found, incident=an_incident()), node_ctx(tmp_path))
    assert [a.description for a in down] == ["stop the guard (pid 7)",
                                             "archive the incident record"]


def test_down_archives_an_incident_a_running_guard_records_while_it_is_stopped(tmp_path):
    """A node lost while `down` runs: its peers' guards fire between down's look and their stop.
    What one left is archived after the stop, only if it is there (a clean stop leaves none)."""
    down = StopGuard().plan(facts([7], "x"), node_ctx(tmp_path))
    assert [a.description for a in down] == ["stop the guard (pid 7)", "archive the incident record"]
    assert down[1].argv[-1].startswith("if [ -e ") and down[1].argv[-1].endswith("; fi")
    assert StopGuard().plan(facts([], "x"), node_ctx(tmp_path)) == []


# -- the guard's decisions -----------------------------------------------------------------
def guard(peer_timeout=20.0):
    inv = inventory.parse(four_nodes())
    cfg = guard_config.with_digest(guard_config.config(inv, inv.ranked()[1][1].name), SECRET)
    cfg["peer_timeout"] = peer_timeout
    g = node_guard.Guard(cfg, SECRET)
    g.evidence = lambda: {"log_tail": ["last line"], "kernel": []}
    return g


def test_nothing_wrong_is_no_incident():
    assert guard().first_failure() is None


def test_own_engine_exit_names_this_rank_and_its_code():
    g = guard()
    g.engine.update(running=False, exit_code=137, finished="2026-01-01T00:00:00Z")
    found = g.first_failure()
    assert found["failure"]["rank"] == 1 and found["failure"]["exit_code"] == 137
    assert found["failure"]["cause"].endswith("engine exited with code 137")
    assert found["failure"]["at"] == "2026-01-01T00:00:00Z"
    assert found["log_tail"] == ["last line"] and found["seen_by"] == found["recorded_by"]


def test_a_peers_incident_is_adopted_with_its_evidence():
    g = guard()
    theirs = guard_record.incident(g.cfg | {"node": "nodeX"}, guard_record.failure(
        "nodeX", 3, "exited", exit_code=1), "nodeX", {"log_tail": ["boom"]})
    peer = g.cfg["peers"][-1]["node"]
    g.peers[peer]["state"] = {"incident": theirs}
    found = g.first_failure()
    assert found["failure"]["node"] == "nodeX" and found["log_tail"] == ["boom"]
    assert found["learned_from"] == peer and found["recorded_by"] == g.cfg["node"]


def test_a_silent_peer_past_the_timeout_is_unreachable_but_not_before():
    g = guard(peer_timeout=20)
    peer = g.cfg["peers"][0]
    g.peers[peer["node"]]["last_ok"] = time.monotonic() - 10
    assert g.first_failure() is None
    g.peers[peer["node"]]["last_ok"] = time.monotonic() - 25
    found = g.first_failure()
    assert (found["failure"]["node"], found["failure"]["kind"]) == (peer["node"], "unreachable")


def test_reaching_no_peer_at_all_names_this_node_as_cut_off():
    g = guard()
    for i, seen in enumerate(g.peers.values()):  # the first one past the timeout, the rest near
        seen["last_ok"] = time.monotonic() - (21 if i == 0 else 19)
    found = g.first_failure()
    assert found["failure"]["node"] == g.cfg["node"]
    assert "reaches none of its 3 peers" in found["failure"]["cause"]


def test_requests_are_signed_without_sending_the_secret():
    ts = f"{time.time():.3f}"
    header = f"{ts}:{node_guard.net.sign(SECRET, 'GET', '/state', ts)}"
    assert SECRET not in header
    assert node_guard.net.signed_ok(SECRET, "GET", "/state", header)
    assert not node_guard.net.signed_ok(SECRET + "x", "GET", "/state", header)
    old = f"{time.time() - 3600:.3f}"
    assert not node_guard.net.signed_ok(SECRET, "GET", "/state",
                                    f"{old}:{node_guard.net.sign(SECRET, 'GET', '/state', old)}")


def test_log_lines_are_redacted_before_the_record():
    line = f"api_key=k3-abcdefgh token {SECRET} Bearer abcdefghijkl hf_{'a' * 20}"
    out = guard_record.redact(line, [SECRET])
    assert SECRET not in out and "k3-abcdefgh" not in out and "hf_aaaa" not in out
    assert "abcdefghijkl" not in out


# -- cluster state -------------------------------------------------------------------------
def live(running=True, incident=None, reachable=True):
    return {"reachable": reachable, "container": container(running) if running is not None
            else None, "incident": incident}


HEALTHY = http.Endpoint(health=http.Answer(200))


def test_cluster_states():
    serving = {"a": {**live(), "health": HEALTHY}, "b": live()}
    assert cluster_state.summarize(serving)["state"] == "serving"
    # every engine runs, but the head does not answer /health yet: not serving
    assert cluster_state.summarize({"a": live(), "b": live()})["state"] == "degraded"
    assert cluster_state.summarize({"a": live(None), "b": live(False)})["state"] == "down"
    assert cluster_state.summarize({"a": live(), "b": live(False)})["state"] == "degraded"
    assert cluster_state.summarize({"a": live(), "b": live(reachable=False)})["state"] == \
        "unreachable"


def test_stopped_by_guard_shows_the_earliest_failure_and_since_when():
    early = {"failure": {"at": "2026-01-01T00:00:01", "cause": "rank 2 (n2): engine exited "
                         "with code 137"}, "recorded_at": "2026-01-01T00:00:03",
             "recorded_by": "n1", "seen_by": "n2"}
    late = {"failure": {"at": "2026-01-01T00:00:05", "cause": "x"},
            "recorded_at": "2026-01-01T00:00:02", "recorded_by": "n3"}
    found = cluster_state.summarize({"n1": live(False, early), "n3": live(False, late),
                                     "n2": live(reachable=False)})
    assert found["state"] == "stopped-by-guard" and found["incident"] is early
    assert found["since"] == "2026-01-01T00:00:02" and found["recorded_on"] == ["n1", "n3"]
    text = cluster_state.line("c", found)
    assert "stopped by the guard since 2026-01-01T00:00:02" in text
    assert "rank 2 (n2): engine exited with code 137" in text and "seen by n2" in text


# -- watch -----------------------------------------------------------------------------------
def scripted_watch(monkeypatch, states, restart):
    """A Watch whose observations come from `states` and whose bring-ups are counted."""
    from k3deploy.cli import watch_cmd
    monkeypatch.setattr(watch_cmd.interrupt, "sleep", lambda s: None)
    monkeypatch.setattr(watch_cmd, "say", lambda text: lines.append(text))
    lines: list[str] = []
    feed = iter(states)
    w = watch_cmd.Watch("inv.yaml", restart, 1.0)
    w.observe = lambda: next(feed)
    w.bring_up = lambda: w.__dict__.setdefault("ups", []).append(1) or 0
    return w, lines


def stopped(node, rank, at):
    failure = {"node": node, "rank": rank, "kind": "exited", "at": at,
               "cause": f"rank {rank} ({node}): engine exited with code 137"}
    return {"name": "c", "state": "stopped-by-guard", "since": at,
            "incident": {"failure": failure, "seen_by": node}}


def test_watch_restarts_once_then_names_both_incidents(monkeypatch):
    up = {"name": "c", "state": "serving", "incident": None}
    states = [up, up, stopped("n2", 2, "t1"), up, stopped("n1", 1, "t2")]
    w, lines = scripted_watch(monkeypatch, states, restart=1)
    assert w.run() == 1
    assert w.ups == [1]
    assert sum("serving" in ln for ln in lines) == 2  # one line per change, not per look
    assert "restart 1 of 1 in 10s" in lines
    assert any("incident 1: rank 2 (n2)" in ln for ln in lines)
    assert any("incident 2: rank 1 (n1)" in ln for ln in lines)


def test_watch_without_restart_only_follows(monkeypatch):
    states = [stopped("n2", 2, "t1")] * 3
    w, lines = scripted_watch(monkeypatch, states, restart=None)
    with pytest.raises(StopIteration):
        w.run()
    assert "ups" not in w.__dict__ and len(lines) == 1


def test_backoff_grows_and_is_capped():
    from k3deploy.cli.watch_cmd import backoff
    assert [backoff(n) for n in (1, 2, 3)] == [10, 20, 40] and backoff(20) == 300


def test_check_mode_without_a_secret_yet_plans_the_start(tmp_path):
    node = node_ctx(tmp_path)
    node.run.inputs = dataclasses.replace(node.run.inputs, guard_secret=None)  # --check: none
    actions = StartGuard().plan(facts([], "x"), node)
    assert actions[-1].description == "start the guard, detached"


def test_head_serving_port_refusing_past_the_timeout_is_not_serving(monkeypatch):
    inv = inventory.parse(four_nodes())
    cfg = guard_config.with_digest(guard_config.config(inv, inv.head.name), SECRET)
    g = node_guard.Guard(cfg, SECRET)
    g.evidence = lambda: {"log_tail": [], "kernel": []}
    g.serving = lambda: False
    now = time.monotonic()
    assert g.serving_failure(now) is None                      # refused just now: wait
    assert g.serving_failure(now + 10) is None
    found = g.serving_failure(now + 21)
    assert (found["failure"]["rank"], found["failure"]["kind"]) == (0, "not serving")
    g.serving = lambda: True
    assert g.serving_failure(now + 22) is None and g.refused_since is None


def test_a_guard_mid_fork_is_not_a_second_guard():
    # 471 is the guard's own subprocess between fork and exec (same command line, parent 464);
    # 502 is a second guard (parent 1): only that one makes the node unhealthy.
    assert parse_pids("464 1\n471 464\n", 0) == (464,)
    assert parse_pids("464 1\n502 1\n", 0) == (464, 502)
    assert parse_pids("", 0) == () and parse_pids("464\n", 0) == ()


def test_only_the_guard_itself_counts_as_a_guard_process(tmp_path):
    # Seen in CI: the batch's own `sh -c 'sha256sum .../guard.py ...'` (the node-files fact,
    # running beside the pid probe) was counted as a second guard.
    paths = guard_config.node_paths(node_ctx(tmp_path).inv)
    pattern = re.compile(guard_step.process_pattern(paths))
    for guard in ("python3", "/usr/bin/python3", "/root/.pyenv/versions/3.11.7/bin/python3"):
        assert pattern.search(f"{guard} {paths.script} {paths.config}"), guard
    for other in (f"sha256sum {paths.script}", f"sh -c sha256sum {paths.script} {paths.dir}/guard_record.py",
                  f"sudo -n sh -c setsid nohup python3 {paths.script} {paths.config}",
                  f"python3 {paths.script}.bak", f"python3 {paths.dir}/xguard.py"):
        assert not pattern.search(other), other


def test_an_incident_wakes_every_held_poll_at_once(tmp_path):
    g = guard()
    g.dir, g.stop_engine = str(tmp_path), lambda: "stopped"
    answers = []
    waiter = threading.Thread(target=lambda: answers.append(g.published.wait_past(0, 30)))
    waiter.start()
    started = time.monotonic()
    g.engine.update(running=False, exit_code=137)
    g.fire(g.first_failure())
    waiter.join(timeout=10)
    assert answers and answers[0]["incident"]["failure"]["exit_code"] == 137
    assert time.monotonic() - started < 5 and answers[0]["version"] >= 1


def test_a_peer_is_silent_only_past_two_heartbeats():
    g = guard(peer_timeout=20)  # heartbeat (hold) 5 s
    for seen in g.peers.values():
        seen["last_ok"] = time.monotonic() - 8  # within two heartbeats: not quiet
    g.peers[g.cfg["peers"][0]["node"]]["last_ok"] = time.monotonic() - 21
    found = g.first_failure()
    assert found["failure"]["node"] == g.cfg["peers"][0]["node"], found  # that peer, not me


def test_every_sglang_rank_reports_progress_and_only_the_head_probes():
    inv = inventory.parse(four_nodes())
    head, worker = (guard_config.config(inv, n.name) for n in (inv.ranked()[0][1], inv.ranked()[2][1]))
    assert head["wedge_seconds"] == worker["wedge_seconds"] == 60
    assert head["metrics_port"] == worker["metrics_port"] == inv.ports.serve
    assert worker["probe"] is None
    assert head["probe"] == {"port": inv.ports.serve, "model": inv.model.repo, "every": 15.0,
                             "key_file": "/mnt/nvme/.k3deploy/secrets/sglang-secret.yaml"}
    doc = four_nodes()
    doc["engine"] = {**doc.get("engine", {}), "kind": "vllm"}
    doc["nodes"] = doc["nodes"][:2]
    doc["guard"] = {"wedge_seconds": 8}
    vllm = inventory.parse(doc)
    assert guard_config.config(vllm, vllm.ranked()[1][1].name)["metrics_port"] is None
    assert guard_config.config(vllm, vllm.head.name)["probe"]["every"] == 2.0

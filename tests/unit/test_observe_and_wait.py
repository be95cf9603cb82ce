"""The runner's batched look (run/observer.py), the one polling loop (run/waiter.py) and the
fact batch itself (node/facts.py), against in-memory nodes."""

import os
import re
import shutil
import shlex
import subprocess
import time
from dataclasses import dataclass, replace

import pytest

from k3deploy.cluster import inventory
from k3deploy.core.errors import StepFailed, UnreachableError
from k3deploy.node import facts as F
from k3deploy.node.context import RunContext
from k3deploy.run import waiter as waiter_module
from k3deploy.run.runner import Runner
from k3deploy.steps.base import Step, cmd, wait
from tests.unit.fakes import FakeConn, FakeSession, section
from tests.unit.docker_facts import container
from tests.unit.invdata import four_nodes


@dataclass(frozen=True)
class Said:
    value: str | None
    own: str | None = None


class Asks(Step[Said]):
    """Looks at `cat /<name>`; wants it to say "yes"."""

    Facts = Said

    def __init__(self, name: str):
        super().__init__()
        self.name = name

    def probes(self, node):
        return [F.command("value", ["cat", f"/{self.name}"])]

    def plan(self, facts, node):
        return [] if facts.value == "yes" else [cmd(f"set {self.name}", "set", self.name)]


class World(FakeConn):
    """Answers every `cat /X` of a batch from its own dict; `set X` makes X say yes."""

    def __init__(self, name, values):
        super().__init__(name)
        self.values = values
        self.batches = 0

    def respond(self, command):
        if command.startswith("set "):
            self.values[command.split()[1]] = "yes"
            return 0, ""
        if "@@k3fact@@" not in command:
            return 0, ""
        self.batches += 1
        asked = re.findall(r'@@k3fact@@begin (\S+); \( cat /(\w+) \)', command)
        return 0, "".join(section(command, name, self.values[key]) for name, key in asked)


def run_with(tmp_path, values_per_node, steps):
    inv = inventory.parse(four_nodes())
    conns = {n.name: World(n.name, dict(values_per_node)) for n in inv.nodes}
    run = RunContext(inv=inv, session=FakeSession(inv, tmp_path, conns))
    return Runner(run, steps).execute(), conns


def test_a_no_op_run_looks_once_per_node_for_every_step(tmp_path):
    report, conns = run_with(tmp_path, {"a": "yes", "b": "yes", "c": "yes"},
                             [Asks("a"), Asks("b"), Asks("c")])
    assert {r.status for per in report.results.values() for r in per.values()} == {"ok"}
    # One round trip per node: which machine it is and every step's facts.
    assert {c.batches for c in conns.values()} == {1}


class AsksTwoOneOnItsOwn(Asks):
    """Like verify: one fact asked ahead (GPUs) and one only in its own look (the chat)."""

    def probes(self, node):
        return [F.command("value", ["cat", f"/{self.name}"]),
                replace(F.command("own", ["cat", "/chat"]), ahead=False)]

    def plan(self, facts, node):
        return [] if facts.value == facts.own == "yes" else [cmd("set", "set", "chat")]


class Recording(World):
    def respond(self, command):
        self.asked = [*getattr(self, "asked", []),
                      re.findall(r'@@k3fact@@begin \S+; \( cat /(\w+) \)', command)]
        return super().respond(command)


class AsksBounded(Asks):
    """Like verify: its chat asked ahead in a bounded form (`cat /quick`), as it is in its own
    look (`cat /chat`)."""

    def probes(self, node):
        full = F.command("own", ["cat", "/chat"])
        return [F.command("value", ["cat", f"/{self.name}"]),
                replace(full, ahead=F.command("ignored", ["cat", "/quick"]))]

    def plan(self, facts, node):
        return [] if facts.value == facts.own == "yes" else [cmd("set", "set", "chat")]


@pytest.mark.parametrize("quick, looks", [("yes", [("a", "v", "quick")]),
                                          ("cut short", [("a", "v", "quick"), ("v", "chat")])])
def test_a_bounded_form_asked_ahead_settles_a_no_op_or_the_step_looks_again(
        tmp_path, quick, looks):
    inv = inventory.parse(four_nodes())
    conns = {n.name: Recording(n.name, {"a": "yes", "v": "yes", "chat": "yes", "quick": quick})
             for n in inv.nodes}
    run = RunContext(inv=inv, session=FakeSession(inv, tmp_path, conns))
    report = Runner(run, [Asks("a"), AsksBounded("v")]).execute()
    assert {r.status for per in report.results.values() for r in per.values()} == {"ok"}
    # answered within its bound: one look per node; cut short: the step's own look asks the
    # fact as it is (and nothing is set on the bounded form's word)
    assert {tuple(map(tuple, c.asked)) for c in conns.values()} == {tuple(looks)}
    assert all(not any(c.startswith("set") for c in conn.commands) for conn in conns.values())


def test_a_bounded_form_is_asked_ahead_only_in_the_first_look(tmp_path):
    """After a change the step looks itself anyway: a later batch leaves the bounded form out,
    so a stuck engine (whose every answer takes the bound) holds up one look, not each."""
    inv = inventory.parse(four_nodes())
    conns = {n.name: Recording(n.name, {"a": "no", "b": "yes", "v": "yes", "chat": "yes",
                                        "quick": "yes"}) for n in inv.nodes}
    run = RunContext(inv=inv, session=FakeSession(inv, tmp_path, conns))
    report = Runner(run, [Asks("a"), Asks("b"), AsksBounded("v")]).execute()
    assert {per["a"].status for per in report.results.values()} == {"changed"}
    # the first look asks the bounded form (a acts on it: nothing ran before a); a sets (no
    # look) and re-checks; b's look after the change leaves it out; v's own look asks the
    # fact as it is
    looks = [("a", "b", "v", "quick"), (), ("a",), ("b", "v"), ("chat",)]
    assert {tuple(map(tuple, c.asked)) for c in conns.values()} == {tuple(looks)}


def test_a_fact_asked_only_in_its_own_look_leaves_the_others_in_the_batch(tmp_path):
    inv = inventory.parse(four_nodes())
    conns = {n.name: Recording(n.name, {"a": "yes", "v": "yes", "chat": "yes"})
             for n in inv.nodes}
    run = RunContext(inv=inv, session=FakeSession(inv, tmp_path, conns))
    report = Runner(run, [Asks("a"), AsksTwoOneOnItsOwn("v")]).execute()
    assert {r.status for per in report.results.values() for r in per.values()} == {"ok"}
    # the batch reads a and v; v's own look reads only the chat: no command runs twice
    assert {tuple(map(tuple, c.asked)) for c in conns.values()} == {(("a", "v"), ("chat",))}


def test_the_first_look_also_tells_a_replaced_machine(tmp_path):
    inv = inventory.parse(four_nodes())
    conns = {n.name: World(n.name, {"a": "yes"}) for n in inv.nodes}
    conns["node2"].boot_id = "boot-2"   # rebooted into a fresh image since the last run
    session = FakeSession(inv, tmp_path, conns)
    for name, state in session.states.items():
        state.check_identity({"machine_id": f"m-{name}", "boot_id": "boot-1"})
        state.finish("old-step", "changed")
    report = Runner(RunContext(inv=inv, session=session), [Asks("a")]).execute()
    assert {r.status for per in report.results.values() for r in per.values()} == {"ok"}
    assert {c.batches for c in conns.values()} == {1}
    kept = {n: "old-step" in s.data["steps"] for n, s in session.states.items()}
    assert kept == {"node0": True, "node1": True, "node2": False, "node3": True}
    assert session.states["node2"].data["identity"]["boot_id"] == "boot-2"
    # The look ran inside step a: the new machine's state records a as run once, not twice.
    assert session.states["node2"].data["steps"]["a"]["attempts"] == 1


def test_a_change_anywhere_makes_the_next_step_look_again(tmp_path):
    report, conns = run_with(tmp_path, {"a": "no", "b": "yes", "c": "yes"},
                             [Asks("a"), Asks("b"), Asks("c")])
    assert report.results["node0"]["a"].status == "changed"
    # The first look (identity, a, b, c): a acts on it (nothing ran before a); a's re-check;
    # then b looks again for b and c, and c uses that.
    assert {c.batches for c in conns.values()} == {3}


class Settling(World):
    """A world that moves by itself: after the first look, `b` says yes (an engine finishing
    its load on one node while the batched look runs on the others)."""

    def respond(self, command):
        answer = super().respond(command)
        if self.batches == 1:   # the first look
            self.values["b"] = "yes"
        return answer


def test_a_look_ahead_of_time_is_looked_at_again_before_acting_on_it(tmp_path):
    inv = inventory.parse(four_nodes())
    conns = {n.name: Settling(n.name, {"a": "yes", "b": "no"}) for n in inv.nodes}
    run = RunContext(inv=inv, session=FakeSession(inv, tmp_path, conns))
    report = Runner(run, [Asks("a"), Asks("b")]).execute()
    # b's share of the first look said "no"; the look made for b itself says "yes": nothing
    # was set on any node.
    assert {r.status for per in report.results.values() for r in per.values()} == {"ok"}
    assert all(not any(c.startswith("set ") for c in conn.commands) for conn in conns.values())
    assert {c.batches for c in conns.values()} == {2}


def test_a_step_with_work_left_decides_on_its_own_look(tmp_path):
    report, conns = run_with(tmp_path, {"a": "yes", "b": "no"}, [Asks("a"), Asks("b")])
    assert {per["b"].status for per in report.results.values()} == {"changed"}
    # the first look, b's own look before acting, b's re-check
    assert {c.batches for c in conns.values()} == {3}


def test_the_same_command_asked_twice_runs_once_and_answers_both():
    facts = [F.command("cuda", ["echo", "13.0"]), F.command("again", ["echo", "13.0"]),
             F.Fact("key", "cat", F.text, stdin="sk-secret"), F.Fact("failing", "exit 3", F.integer),
             F.Fact("code", "echo 7; exit 4", lambda out, code: (out.strip(), code))]
    script = F.compose(facts)
    assert script.count("echo 13.0") == 1
    assert "sk-secret" in script   # as a here-document on stdin, never in argv
    out = subprocess.run(["sh", "-s"], input=script, capture_output=True, text=True).stdout
    assert F.parse_output(facts, out) == {"cuda": "13.0", "again": "13.0", "key": "sk-secret",
                                          "failing": None, "code": ("7", 4)}


def test_the_facts_of_a_batch_run_at_once(tmp_path):
    # each fact checks in, then waits (up to 10 s) until all six have: only facts that run at
    # the same time all see six; one after another, the first would give up alone
    wait = (f"touch {tmp_path}/$0; n=0; while [ $(ls {tmp_path} | wc -l) -lt 6 ] && "
            "[ $n -lt 100 ]; do sleep 0.1; n=$((n+1)); done; ls " + str(tmp_path) + " | wc -l")
    facts = [F.Fact(f"slow{i}", f"sh -c {shlex.quote(wait)} f{i}", F.text) for i in range(6)]
    out = subprocess.run(["sh", "-s"], input=F.compose(facts), capture_output=True,
                         text=True).stdout
    assert set(F.parse_output(facts, out).values()) == {"6"}


def test_a_batch_spends_no_process_per_fact_on_printing_or_sudo():
    # A no-op's cost on the nodes is mostly forks: dozens of facts on every node at once.
    facts = [F.Fact(f"f{i}", f"echo {i}", F.text, sudo=i % 2 == 0) for i in range(12)]
    script = F.compose(facts)
    assert script.count("cat ") == 1 and script.count("id -u") == 1
    out = subprocess.run(["sh", "-s"], input=script, capture_output=True, text=True).stdout
    assert F.parse_output(facts, out) == {f"f{i}": str(i) for i in range(12)}


def test_the_python_facts_of_a_batch_share_one_interpreter_each_on_its_own():
    both = lambda out, code: (out.strip(), code)  # noqa: E731
    facts = [
        F.python("argv", "import sys; print(' '.join(sys.argv[1:]))", ["a b", "c"], both),
        F.python("stdin", "import sys, json; print(json.load(sys.stdin)['key'])", [], both,
                 stdin='{"key": "sk-secret"}'),
        F.python("said", "import sys; print('half'); sys.exit('no such cache')", [], both),
        F.python("code", "raise SystemExit(3)", [], both),
        F.python("raised", "x = 1\nraise ValueError('boom')", [], both),
        F.python("globals", "print('x' in globals())", [], both),  # not the program before's
        F.Fact("shell", "echo from sh", F.text),
        F.python("as_root", "print('sudo')", [], both, sudo=True),
    ]
    script = F.compose(facts)
    assert script.count("python3 - \"$k3d\"") == 1 and "sk-secret" in script  # a here-document
    out = subprocess.run(["sh", "-s"], input=script, capture_output=True, text=True).stdout
    got = F.parse_output(facts, out)
    assert got["argv"] == ("a b c", 0) and got["stdin"] == ("sk-secret", 0)
    assert got["said"] == ("half\nno such cache", 1) and got["code"] == ("", 3)
    assert got["raised"][1] == 1 and "ValueError: boom" in got["raised"][0]
    assert got["globals"] == ("False", 0) and got["shell"] == "from sh"
    assert got["as_root"] == ("sudo", 0)  # a sudo program runs by itself, the sh way


class Waits(Step):
    """Waits until the node's counter reaches `goal`; the counter moves by `step` per look."""

    name = "waits"

    def __init__(self, goal, step=1, stall=None, timeout=None, dies_at=None):
        super().__init__()
        self.goal, self.step, self.stall, self.timeout, self.dies_at = \
            goal, step, stall, timeout, dies_at
        self.seen = 0

    def facts(self, node, waiting=False):
        assert waiting, "a wait's polls include the step's wait_probes"
        self.seen += self.step
        return {"count": self.seen}

    def plan(self, facts, node):
        if facts["count"] >= self.goal:
            return []
        return [wait("wait for the count", "count reached", poll=0.01, stall=self.stall,
                     timeout=self.timeout)]

    def progress(self, facts, node):
        if self.dies_at is not None and facts["count"] >= self.dies_at:
            raise StepFailed(node.name, "the counter died", step=self.name)
        return facts["count"]


def waiter_for(tmp_path):
    inv = inventory.parse(four_nodes())
    run = RunContext(inv=inv, session=FakeSession(inv, tmp_path))
    runner = Runner(run, [])
    return run.executor.waiter, runner.contexts[0]


def test_the_wait_ends_when_the_plan_no_longer_asks_for_it(tmp_path):
    waiter, node = waiter_for(tmp_path)
    step = Waits(goal=5)
    assert waiter(step, node, step.plan({"count": 0}, node)[0].wait) == {"count": 5}


def test_a_wait_without_progress_fails_at_its_stall_limit_with_the_hint(tmp_path):
    waiter, node = waiter_for(tmp_path)
    step = Waits(goal=5, step=0, stall=0.05)
    with pytest.raises(StepFailed, match="count reached; no progress for 0s"):
        waiter(step, node, step.plan({"count": 0}, node)[0].wait)


def test_a_wait_fails_at_its_timeout_even_while_progressing(tmp_path):
    waiter, node = waiter_for(tmp_path)
    step = Waits(goal=10**9, timeout=0.05)
    with pytest.raises(StepFailed, match="not so within 0s"):
        waiter(step, node, step.plan({"count": 0}, node)[0].wait)


def test_what_is_awaited_dying_fails_the_wait_at_once(tmp_path):
    waiter, node = waiter_for(tmp_path)
    step = Waits(goal=100, dies_at=3)
    with pytest.raises(StepFailed, match="the counter died"):
        waiter(step, node, step.plan({"count": 0}, node)[0].wait)
    assert step.seen == 3


def test_looks_are_paced_by_their_start_so_a_held_look_adds_no_sleep(tmp_path, monkeypatch):
    # A look that takes the whole poll (held on the node until what is awaited ends, or a slow
    # round trip) is followed by the next at once; a quick one by the rest of the poll.
    clock, slept = [100.0], []
    monkeypatch.setattr(waiter_module.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(waiter_module.interrupt, "sleep", lambda s: slept.append(round(s, 3)))

    class Held(Waits):
        def facts(self, node, waiting=False):
            clock[0] += 0.01 if self.seen % 2 else 0.5   # held, quick, held, ...
            return super().facts(node, waiting)

        def plan(self, facts, node):
            return [wait("w", "count reached", poll=0.5)] if facts["count"] < self.goal else []
    waiter, node = waiter_for(tmp_path)
    step = Held(goal=4)
    waiter(step, node, step.plan({"count": 0}, node)[0].wait)
    assert slept == [0.0, 0.49, 0.0]


def engine(running=True, rank=0, finished=None, code=0):
    return container(running, exit_code=code, **({"finished": finished} if finished else {}),
                     cmd=("python3", "-m", "sglang.launch_server", "--node-rank", str(rank)))


def ranks_waiting(**more):
    """Every rank's wait facts (steps/engine/wait.py WaitFacts) as a wait's look gives them: its
    engine running, its log (empty), no /health answer."""
    from k3deploy.steps.engine.wait import WaitFacts
    return {f"node{i}": WaitFacts(engine(rank=i), log="", **more) for i in range(4)}


def gpus(used_mib, total_mib=8 * 81559):
    """A rank's GPUs as nvidia-smi gives them (one record holding their sums); None: it did
    not answer."""
    from k3deploy.facts.nvidia_smi import Gpu
    return None if used_mib is None else (Gpu("NVIDIA H100 80GB HBM3", total_mib, used_mib),)


def test_the_endpoint_wait_blames_the_rank_that_exited_first_with_its_log(tmp_path):
    from k3deploy.steps.engine.wait import WaitHealthy
    inv = inventory.parse(four_nodes())
    run = RunContext(inv=inv, session=FakeSession(inv, tmp_path))
    step = WaitHealthy()
    step.prepare(run)
    seen = ranks_waiting()
    step.check_cluster(seen, run, waited=1.0, looked_at=0.0)   # all running, none loading yet: keep waiting
    seen["node3"] = replace(seen["node3"], container=engine(False, 3, "2026-11-30T10:00:02.5Z", 1))
    seen["node1"] = replace(seen["node1"], container=engine(False, 1, "2026-11-30T10:00:02.25Z", 1),
                            log="loading\nCUDA error: an illegal memory access")
    with pytest.raises(StepFailed) as err:
        step.check_cluster(seen, run, waited=2.0, looked_at=0.0)
    assert err.value.node == "node1" and "illegal memory access" in str(err.value)
    assert "node3 exited after it" in str(err.value)


def test_the_endpoint_wait_gives_up_when_no_rank_ever_loads(tmp_path):
    from k3deploy.steps.engine.wait import WaitHealthy
    inv = inventory.parse(four_nodes())
    run = RunContext(inv=inv, session=FakeSession(inv, tmp_path))
    step = WaitHealthy({"form_timeout": 5})
    step.prepare(run)
    seen = ranks_waiting()
    step.check_cluster(seen, run, waited=0.0, looked_at=100.0)     # the clock starts
    with pytest.raises(StepFailed, match="the process group did not form within 5s"):
        step.check_cluster(seen, run, waited=6.0, looked_at=106.0)  # 6 s of silence
    # SGLang >= 0.5.10's bar, on global rank 0 (the head) only: the group formed.
    seen["node0"] = replace(seen["node0"], log="Multi-thread loading shards:   0% Completed | "
                            "0/96 [00:00<?, ?it/s]\n")
    fresh = WaitHealthy({"form_timeout": 5})
    fresh.prepare(run)
    fresh.check_cluster(seen, run, waited=0.0, looked_at=100.0)
    fresh.check_cluster(seen, run, waited=6.0, looked_at=106.0)


def test_the_form_timeout_bounds_silence_not_the_time_the_ranks_take(tmp_path):
    """No rank past distributed init yet, but GPU memory grows on a rank: three form timeouts
    pass without a failure; then nothing moves for longer than one: it fails."""
    from k3deploy.steps.engine.wait import WaitHealthy
    inv = inventory.parse(four_nodes())
    run = RunContext(inv=inv, session=FakeSession(inv, tmp_path))
    step = WaitHealthy({"form_timeout": 5})
    step.prepare(run)
    seen = ranks_waiting(gpus=gpus(0))
    for t in range(0, 16):                        # 15 s = 3 x form_timeout, memory growing
        seen["node1"] = replace(seen["node1"], gpus=gpus(1000 * t))
        step.check_cluster(seen, run, waited=float(t), looked_at=100.0 + t)
    step.check_cluster(seen, run, waited=20.0, looked_at=120.0)   # 5 s still: not yet over
    with pytest.raises(StepFailed, match="did not form within 5s"):
        step.check_cluster(seen, run, waited=21.0, looked_at=121.0)


def test_the_batched_look_leaves_the_logs_to_the_wait(tmp_path):
    """A no-op never waits, so its one look per node reads no engine log; a wait's polls do
    (every rank's, to show progress and to blame the rank that exited)."""
    from k3deploy.steps.engine.wait import WaitHealthy
    inv = inventory.parse(four_nodes())
    run = RunContext(inv=inv, session=FakeSession(inv, tmp_path))
    step = WaitHealthy()
    step.prepare(run)
    for node in Runner(run, [step]).contexts:
        assert not any("logs" in f.script for f in step.probes(node)), node.name
        assert [f.name for f in step.wait_probes(node)] == ["log", "gpus", "usage"]
        assert "docker logs" in step.wait_probes(node)[0].script


def test_built_in_reads_answer_as_their_shell_commands(tmp_path):
    """Each F.native fact against the shell command it stands for (its `script`), run as
    plain shell facts in a batch of their own: same output on success, same exit code always."""
    both = lambda out, code: (out.strip(), code)  # noqa: E731
    text, log, missing = tmp_path / "state.json", tmp_path / "download.log", tmp_path / "gone"
    text.write_text('{"a": 1}\n')
    log.write_text("".join(f"line {i}\n" for i in range(60)))
    q = shlex.quote
    cases = [
        ("cat", [str(text)], f"cat {q(str(text))}"),
        ("cat", [str(missing)], f"cat {q(str(missing))}"),
        ("cat_quiet", [str(text), str(missing)], f"cat {text} {missing} 2>/dev/null"),
        ("sha256", [str(text), str(log)], f"sha256sum {text} {log}"),
        ("sha256_present", [str(text), str(missing)], f"sha256sum {text} {missing} 2>/dev/null; true"),
        ("sha256_hex", [str(log)], f"sha256sum {log} | cut -d' ' -f1"),
        ("tail", ["40", str(log)], f"tail -n 40 {log}"),
        ("tail", ["40", str(missing)], f"tail -n 40 {missing}"),
        ("exists", [str(missing)], f"test -e {missing}"),
        ("exists", [str(log)], f"test -e {log}"),
        ("is_dir", [str(tmp_path)], f"test -d {tmp_path}"),
        ("is_dir", [str(log)], f"test -d {log}"),
        ("writable", [str(tmp_path), str(log)], f"test -w {tmp_path} && test -w {log}"),
        ("writable", [str(missing)], f"test -w {missing}"),
        ("owner", [str(log)], f"stat -c %U {log}"),
        ("login_user", [], "id -un"),
        ("avail_bytes", [str(tmp_path)], f"df -B1 --output=avail {tmp_path} | tail -n 1"),
        ("root_or_sudo", [], 'test "$(id -u)" = 0 || sudo -n true'),
    ]
    native = [F.native(f"n{i}", op, args, both) for i, (op, args, _) in enumerate(cases)]
    assert [f.script for f in native] == [script for _, _, script in cases]
    shell = [F.Fact(f"n{i}", script, both) for i, (_, _, script) in enumerate(cases)]
    script = F.compose(native)
    assert script.count("python3 - ") == 1 and '> "$k3d/' not in script   # no shell fact
    got, want = (F.parse_output(facts, subprocess.run(["sh", "-s"], input=F.compose(facts),
                                capture_output=True, text=True).stdout) for facts in (native, shell))
    for i, (op, args, _) in enumerate(cases):
        (out, code), (out_sh, code_sh) = got[f"n{i}"], want[f"n{i}"]
        assert code == code_sh, (op, args, got[f"n{i}"], want[f"n{i}"])
        if op == "avail_bytes":   # the disk is shared: compared below, between two shell reads
            assert int(out) > 0 and int(out_sh) > 0
        elif code == 0 or op in ("cat", "sha256"):
            assert out == out_sh, (op, args, out, out_sh)
    _assert_avail_bytes_between_two_df_reads(tmp_path, both)
    now = F.parse_output([F.native("now", "now", [], F.integer)], subprocess.run(
        ["sh", "-s"], input=F.compose([F.native("now", "now", [], F.integer)]),
        capture_output=True, text=True).stdout)["now"]
    assert abs(now - time.time()) < 5


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("runuser"),
                    reason="runs the batch as nobody: needs root and runuser")
def test_a_built_in_read_that_needs_root_goes_through_sudo_for_another_login():
    """As a login that is not root, a sudo fact is its shell command under `sudo -n`, as a
    shell fact would be: nobody has no sudo rule, so both fail the same way."""
    both = lambda out, code: (out.strip(), code)  # noqa: E731
    facts = [F.native("dir", "is_dir", ["/"], both, sudo=True),
             F.native("plain", "exists", ["/"], both)]
    shell = [F.Fact("dir", "test -d /", both, sudo=True), F.Fact("plain", "test -e /", both)]
    got, want = (F.parse_output(batch, subprocess.run(
        ["runuser", "-u", "nobody", "--", "sh", "-s"], input=F.compose(batch), cwd="/",
        capture_output=True, text=True).stdout) for batch in (facts, shell))
    assert got["plain"] == want["plain"] == ("", 0)
    assert got["dir"][1] == want["dir"][1] != 0 and "sudo" in got["dir"][0], (got, want)


class Unmeasured(Waits):
    """No progress measure yet (None), e.g. the engine wait before the group formed."""

    def progress(self, facts, node):
        return None


def test_a_wait_with_no_progress_measure_is_not_held_to_its_stall_limit(tmp_path):
    waiter, node = waiter_for(tmp_path)
    step = Unmeasured(goal=40, stall=0.05)   # 40 polls of 10 ms: well past the stall limit
    assert waiter(step, node, step.plan({"count": 0}, node)[0].wait) == {"count": 40}


BAR = "Multi-thread loading shards: {p:3d}% Completed | {n}/96 [00:{n:02d}<00:10,  1.00it/s]\n"


def test_the_endpoint_wait_is_judged_by_rank0_progress_once_formed(tmp_path):
    from k3deploy.steps.engine.wait import WaitHealthy
    inv = inventory.parse(four_nodes())
    run = RunContext(inv=inv, session=FakeSession(inv, tmp_path))
    step = WaitHealthy({"form_timeout": 5, "stall_seconds": 60})
    step.prepare(run)
    node0 = Runner(run, [step]).contexts[0]
    seen = ranks_waiting()
    assert step.progress(seen["node0"], node0) is None          # forming: the form timeout
    seen["node0"] = replace(seen["node0"], log=BAR.format(p=0, n=0))
    step.check_cluster(seen, run, waited=300.0, looked_at=0.0)   # long past the form timeout: formed
    first = step.progress(seen["node0"], node0)
    seen["node0"] = replace(seen["node0"], log=seen["node0"].log + BAR.format(p=1, n=1))
    step.check_cluster(seen, run, waited=301.0, looked_at=1.0)   # each poll looks, then asks
    assert step.progress(seen["node0"], node0) not in (first, None)   # the bar advanced
    # Warm-up: our own /health polls push the bar out of the log tail; no new progress.
    last = step.progress(seen["node0"], node0)
    seen["node0"] = replace(seen["node0"], log='[2026-05-28 05:58:29] INFO:     127.0.0.1:50078 '
                            '- "GET /health HTTP/1.1" 503\n' * 30)
    step.check_cluster(seen, run, waited=302.0, looked_at=2.0)
    assert step.progress(seen["node0"], node0) == last
    seen["node2"] = replace(seen["node2"], gpus=gpus(4096))     # a rank's GPUs fill: progress
    step.check_cluster(seen, run, waited=303.0, looked_at=3.0)
    assert step.progress(seen["node0"], node0) != last
    wait_action = step.plan(seen["node0"], node0)[0].wait
    assert wait_action.stall == 60 and wait_action.timeout is None


def test_rank0_answering_at_all_means_the_group_formed(tmp_path):
    from k3deploy.facts import http
    from k3deploy.steps.engine.wait import WaitFacts, formed
    warming = http.Endpoint(health=http.Answer(503))      # SGLang: 503 during warm-up
    assert formed(WaitFacts(engine(), health=warming, log=""))
    assert not formed(WaitFacts(engine(), log="[2026-02-25 15:39:24 TP8] Init torch distributed "
                                "begin.\n"))
    refused = http.Endpoint(health=http.Answer(None, error="refused"))
    assert not formed(WaitFacts(engine(), health=refused))


def _assert_avail_bytes_between_two_df_reads(path, parse):
    """Other writers share the disk: the native read must lie between a df just before and one
    just after it (what they wrote or freed meanwhile moves both), within a block's rounding."""
    def read(fact):
        out = subprocess.run(["sh", "-s"], input=F.compose([fact]), capture_output=True,
                             text=True).stdout
        return int(F.parse_output([fact], out)["v"][0])
    shell = F.Fact("v", f"df -B1 --output=avail {path} | tail -n 1", parse)
    before, native, after = read(shell), read(F.native("v", "avail_bytes", [str(path)], parse)), \
        read(shell)
    slack = max(before, after) // 100 + 2**20   # df rounds; the one-read check allowed 1% too
    assert min(before, after) - slack <= native <= max(before, after) + slack, \
        (before, native, after)


class FailsOnItsFirstJudgement(Asks):
    """Its look-ahead facts cannot be judged (as a stale batch may not): the runner says so in
    the log, then decides on a look made now."""

    def __init__(self, name):
        super().__init__(name)
        self.judged: set[str] = set()

    def problems(self, facts, node):
        if node.name not in self.judged:
            self.judged.add(node.name)
            raise StepFailed(node.name, "cannot judge these facts", step=self.name)
        return []


def test_a_look_ahead_that_raises_is_logged_and_looked_at_again(tmp_path):
    from structlog.testing import capture_logs
    with capture_logs() as events:
        report, conns = run_with(tmp_path, {"a": "yes", "b": "yes"},
                                 [Asks("a"), FailsOnItsFirstJudgement("b")])
    assert {per["b"].status for per in report.results.values()} == {"ok"}
    said = [e for e in events if e["event"] == "step.look_ahead_failed"]
    assert sorted(e["node"] for e in said) == [f"node{i}" for i in range(4)]
    assert all(e["step"] == "b" and "cannot judge these facts" in e["error"] for e in said)
    assert {c.batches for c in conns.values()} == {2}   # the first look, b's own look now


class HeadLooksAtRanks(Asks):
    """Like the head's wait: it reads every rank, and one rank's machine is gone. That rank's
    own thread finishes after the head's (its last answer came in before it went): its result
    must not overwrite what the head found."""

    def plan(self, facts, node):
        if node.is_head:
            raise UnreachableError("node3", "cannot reach root@node3:22 after 3 attempts",
                                   hint="is the node up (spot reclaim?) and port open?")
        if node.name == "node3":
            time.sleep(0.3)
        return []


def test_a_rank_the_head_cannot_reach_is_the_node_named_unreachable(tmp_path):
    report, _ = run_with(tmp_path, {"w": "yes"}, [HeadLooksAtRanks("w")])
    assert report.results["node0"]["w"].status == "failed"
    assert report.results["node3"]["w"].status == "unreachable"
    assert report.unreachable_nodes() == ["node3"]
    assert any("node3:22" in line for line in report.results["node0"]["w"].error)

"""A rank that must start beside ranks still running (a reclaimed node replaced by a fresh
machine) cannot join their formed group: the group is relaunched whole, each node keeping its
rank. One decision (steps/engine/regroup.py), made before guard-stop from every node's engine, read by
guard-stop (every guard goes) and launch (every rank removed and started again)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest

from k3deploy import engines
from k3deploy.cluster import inventory
from k3deploy.core.errors import StepFailed
from k3deploy.node import facts as F
from k3deploy.node.context import RunContext
from k3deploy.run.runner import Runner
from k3deploy.steps.engine import regroup
from k3deploy.steps.base import Step
from k3deploy.steps.guard import StopGuard
from tests.unit.fakes import FakeSession
from tests.unit.docker_facts import container
from tests.unit.invdata import four_nodes
from tests.unit.test_guard_logic import facts as guard_facts
from tests.unit.test_observe_and_wait import Asks, World
from tests.unit.test_step_plans import launch_facts

INV = inventory.parse(four_nodes())
NAMES = [n.name for _, n in INV.ranked()]


def engine(running=True, cid="c-old", label="x", rank=None):
    return container(running, id=cid, labels={engines.CONFIG_LABEL: label},
                     cmd=() if rank is None else ("sglang", "serve", "--node-rank", str(rank)))


def test_the_group_is_relaunched_only_when_some_ranks_run_and_others_must_start():
    assert not regroup.decide({n: engine() for n in NAMES}, INV).whole          # serving
    assert not regroup.decide({n: None for n in NAMES}, INV).whole              # first up
    replaced = regroup.decide({**{n: engine() for n in NAMES}, NAMES[2]: None}, INV)
    assert replaced.whole and replaced.to_start == (NAMES[2],)
    assert sorted(replaced.running) == sorted(set(NAMES) - {NAMES[2]})
    said = replaced.reason()
    assert said.startswith(f"{NAMES[2]} must start while") and "keeping its rank" in said
    exited = regroup.decide({**{n: engine() for n in NAMES}, NAMES[1]: engine(running=False)},
                            INV)
    assert exited.whole and exited.to_start == (NAMES[1],)


def test_a_container_started_by_hand_with_another_rank_is_not_relaunched_as_ours():
    # test_failure_modes' duplicate rank: node3 runs rank 1 by hand; the wait step names it.
    stray = regroup.decide({**{n: None for n in NAMES}, NAMES[3]: engine(rank=1)}, INV)
    assert not stray.whole and NAMES[3] not in [*stray.running, *stray.to_start]
    ours = regroup.decide({**{n: None for n in NAMES}, NAMES[3]: engine(rank=3)}, INV)
    assert ours.whole and list(ours.running) == [NAMES[3]]


def test_launch_relaunches_a_survivor_with_the_same_rank_then_leaves_the_new_engine(tmp_path):
    step, ctx, facts = launch_facts(tmp_path, rank=1)
    label = facts.spec.labels[engines.CONFIG_LABEL]
    ctx.run.ledger.decide(regroup.decide(
        {**{n: engine(label=label) for n in NAMES}, NAMES[2]: None}, INV))
    actions = step.plan(dataclasses.replace(facts, container=engine(label=label)), ctx)
    assert "remove old container k3" in [a.description for a in actions]
    run = list(actions[-1].argv)
    assert actions[-1].description == "start rank 1" and run[run.index("--node-rank") + 1] == "1"
    started = engine(cid="c-new", label=label)   # the one launch started
    assert step.plan(dataclasses.replace(facts, container=started), ctx) == []


def test_a_rank_that_stopped_after_the_look_fails_launch_naming_it_not_started_alone(tmp_path):
    step, ctx, facts = launch_facts(tmp_path, rank=3)
    ctx.run.ledger.decide(regroup.decide({n: engine() for n in NAMES}, INV))  # all ran
    with pytest.raises(StepFailed, match="started alone it cannot join") as err:
        step.plan(dataclasses.replace(facts, container=engine(running=False)), ctx)
    assert err.value.node == NAMES[3] and "relaunches the whole group" in err.value.hint


def test_guard_stop_before_a_group_relaunch_stops_watching_guards_too(tmp_path):
    step, (_, ctx, _) = StopGuard({"before_launch": True}), launch_facts(tmp_path)
    found = guard_facts([7], "x")
    ctx.run.ledger.decide(regroup.decide({n: engine() for n in NAMES}, INV))
    assert step.plan(found, ctx) == []            # the group stays: its guards watch on
    ctx.run.ledger.decide(regroup.decide({**{n: engine() for n in NAMES}, NAMES[2]: None},
                                         INV))
    assert [a.description for a in step.plan(found, ctx)] == ["stop the guard (pid 7)"]


class Settles(Asks):
    """Asks `a`, and records every node's answer before any node plans."""
    settles = True

    def __init__(self):
        super().__init__("a")
        self.seen, self.planned = None, []

    def settle(self, all_facts, run):
        assert not self.planned
        self.seen = {n: f.value for n, f in all_facts.items()}

    def plan(self, facts, node):
        self.planned.append(node.name)
        return super().plan(facts, node)


@dataclass(frozen=True)
class Slow:
    slow: str | None = None


class Later(Step[Slow]):
    name = "later"
    Facts = Slow
    seen: list = []

    def probes(self, node):
        return [F.Fact("slow", "cat /a", lambda out, code: out.strip(), ahead=False)]

    def plan(self, facts, node):
        self.seen.append(facts.slow)
        return []


def test_settle_sees_every_node_before_any_plan_at_no_extra_round_trip(tmp_path):
    conns = {n: World(n, {"a": "yes"}) for n in NAMES}
    step = Settles()
    run = RunContext(inv=INV, session=FakeSession(INV, tmp_path, conns))
    report = Runner(run, [step]).execute()
    assert {r.status for per in report.results.values() for r in per.values()} == {"ok"}
    assert step.seen == {n: "yes" for n in NAMES} and sorted(step.planned) == sorted(NAMES)
    assert {c.batches for c in conns.values()} == {1}


def test_a_fact_not_asked_ahead_is_left_out_of_an_earlier_steps_batch(tmp_path):
    conns = {n: World(n, {"a": "yes"}) for n in NAMES}
    run = RunContext(inv=INV, session=FakeSession(INV, tmp_path, conns))
    Runner(run, [Asks("a"), Later()]).execute()
    # The first look (identity and a) left Later out; Later looked on its own, every fact.
    assert {c.batches for c in conns.values()} == {2} and Later.seen == ["yes"] * 4

"""Whether a dry-fire passed is the cluster's answer (steps/dry_fire/dry_fire_rules.py
PassedEverywhere): a run cut short between the nodes' reports (issue 53: the disk filled at
one node's seal) leaves the report on some nodes only, and the next run fires the group again
on every node, the kept dry-fire containers included, instead of starting fresh ranks beside
an old rank 0 that takes no new member."""

from __future__ import annotations

import dataclasses

import pytest

from k3deploy import engines
from k3deploy.core.errors import StepFailed
from k3deploy.engines.dry_fire import DRY_FIRE_LABEL
from k3deploy.node.context import NodeContext
from k3deploy.steps.dry_fire.dry_fire import DryFireLaunch, DryFireWait
from k3deploy.steps.dry_fire.dry_fire_rules import PassedEverywhere
from k3deploy.steps.dry_fire.dry_fire_verdict import KEPT, DryFireVerdict
from tests.unit.docker_facts import container
from tests.unit.looked import looked
from tests.unit.test_step_fixtures import node_ctx


def cluster(tmp_path) -> list[NodeContext]:
    """Every node of one run (4x8 H100), in rank order."""
    run = node_ctx({"rank": 0}, tmp_path).run
    return [NodeContext(run, node, rank) for rank, node in run.inv.ranked()]


def dry_config(step, ctx) -> str:
    return looked(step, ctx, cuda="13.0").spec.labels[engines.CONFIG_LABEL]


def left_running(config: str, running: bool = True):
    """The dry-fire container an earlier run started and never stopped."""
    return container(running, labels={engines.CONFIG_LABEL: config, DRY_FIRE_LABEL: "1"})


def launch_facts(ctxs, passed_on: set[int]) -> dict:
    """Each node's facts: its dry-fire left running, its report kept on the nodes passed_on
    (a rank's config label is its own)."""
    step = DryFireLaunch()
    configs = {c.name: dry_config(step, c) for c in ctxs}
    return {c.name: looked(step, c, cuda="13.0", container=left_running(configs[c.name]),
                           dry_fire_passed=(configs[c.name],) if c.rank in passed_on else ())
            for c in ctxs}


def test_a_report_kept_on_some_nodes_only_fires_the_group_again_on_every_node(tmp_path):
    ctxs = cluster(tmp_path)
    step = DryFireLaunch()
    step._launched = set()
    facts = launch_facts(ctxs, passed_on={0, 2})
    # Alone, the head's own report would keep its old rank 0 running
    assert not step.due(facts[ctxs[0].name], ctxs[0])
    decided = step.settle(facts, ctxs[0].run)
    assert decided == PassedEverywhere(False)
    ctxs[0].run.ledger.decide(decided)
    for ctx in ctxs:
        plan = [a.description for a in step.plan(facts[ctx.name], ctx)]
        assert "remove old container k3" in plan and plan[-1] == f"start rank {ctx.rank}", plan


def test_a_report_kept_on_every_node_is_a_pass(tmp_path):
    ctxs = cluster(tmp_path)
    step = DryFireLaunch()
    step._launched = set()
    facts = launch_facts(ctxs, passed_on={0, 1, 2, 3})
    decided = step.settle(facts, ctxs[0].run)
    assert decided == PassedEverywhere(True)
    ctxs[0].run.ledger.decide(decided)
    assert all(step.plan(facts[c.name], c) == [] for c in ctxs)


def test_no_decision_with_no_dry_fire(tmp_path):
    ctxs = cluster(tmp_path)
    step = DryFireLaunch()
    facts = launch_facts(ctxs, passed_on=set())
    run = dataclasses.replace(ctxs[0].run, options={"no_dry_fire": True})
    assert step.settle(facts, run) is None


def test_the_verdict_is_given_again_where_a_report_was_kept_but_not_everywhere(tmp_path):
    ctxs = cluster(tmp_path)
    step = DryFireVerdict()
    step.prepare(ctxs[0].run)
    configs = {c.name: dry_config(DryFireLaunch(), c) for c in ctxs}
    facts = {c.name: looked(step, c, cuda="13.0", container=left_running(configs[c.name]),
                            dry_fire_passed=(configs[c.name],) if c.rank == 0 else ())
             for c in ctxs}
    head = ctxs[0]
    assert step.plan(facts[head.name], head) == []   # its own report alone: judged before
    head.run.ledger.decide(step.settle(facts, head.run))
    shown = [a.description for a in step.plan(facts[head.name], head)]
    assert any("chat completion" in s for s in shown), shown
    assert "keep the dry-fire's report" in shown, shown
    # Once this run kept the head's report, its look after apply plans nothing more
    head.run.ledger.record(head.name, step.label, KEPT)
    assert step.plan(facts[head.name], head) == []


def test_a_passed_dry_fire_left_behind_and_exited_since_is_not_waited_for(tmp_path):
    # The laptop died between the verdict and dry-fire-stop; the engine died later. Passed on
    # every node, nothing fired this run: the wait leaves it to dry-fire-stop, where it
    # used to fail every re-run with "rank 1 container exited (137)".
    ctx = cluster(tmp_path)[1]
    step = DryFireWait()
    exited = looked(step, ctx, container=left_running(dry_config(DryFireLaunch(), ctx), False))
    ctx.run.ledger.decide(PassedEverywhere(True))
    assert step.plan(exited, ctx) == []
    ctx.run.ledger.decide(PassedEverywhere(False))   # fired again this run: its start counts
    with pytest.raises(StepFailed, match="exited"):
        step.plan(exited, ctx)

"""Runs a playbook: for each step, on every node at once (or head first), facts -> plan ->
apply -> re-check. A failing node fails its own steps; the others finish what they can."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from k3deploy.core import group as fan
from k3deploy.core import interrupt
from k3deploy.core import log as klog
from k3deploy.node.context import NodeContext, RunContext
from k3deploy.core.errors import (BadInputError, Interrupted, K3Error, NodeError, StepFailed,
                                  UnreachableError)
from k3deploy.node import facts as F
from k3deploy.node import identity
from k3deploy.run.cluster_look import look_across
from k3deploy.run.observer import Observer
from k3deploy.run.waiter import Waiter
from k3deploy.core.redact import redact
from k3deploy.core.status import SETTLED, Status
from k3deploy.run.report import RunReport, StepResult
from k3deploy.core.group import GroupResult
from k3deploy.steps.base import Action, AnyStep


class Runner:
    def __init__(self, run: RunContext, steps: list[AnyStep]):
        self.run = run
        self.steps = steps
        self.report = RunReport(steps=[s.label for s in steps], partial_ok=all(
            s.runs_after_failures or s.read_only for s in steps))
        self.contexts = [NodeContext(run, node, rank) for rank, node in run.inv.ranked()]
        self.observer = Observer(steps, identified=self._identified, looking=self._flush)
        run.executor.waiter = Waiter(self.contexts)
        # With --log-json these events are the output; otherwise the Ui is and they show with -v.
        self.event_level = logging.INFO if run.option("log_json") else logging.DEBUG
        # Nodes another node's step found at fault (the head's look at a rank that is gone):
        # marked once the step's threads are done, so the node's own result cannot overwrite it.
        self._blamed: list[tuple[str, str, StepResult]] = []

    def execute(self) -> RunReport:
        self.report.ordered([c.name for c in self.contexts])
        self._gate_all()
        # The Hub's answer (prepare) and the SSH logins are independent waits: side by side.
        found: GroupResult[str, dict[str, K3Error] | bool] = fan.run_calls(
            {"connect": lambda: identity.connect_all(self.contexts), "prepare": self._prepare_all})
        connected = found.value("connect")   # connect_all's: the nodes that failed
        self._fail_nodes(connected if isinstance(connected, dict) else {})
        if not found.value("prepare"):
            return self.report
        self.run.started = True   # the inputs are settled: frozen from the first look on
        try:
            for step in self.steps:
                if interrupt.requested() or not self._run_step(step):
                    break
        finally:
            for ctx in self.contexts:
                self._flush(ctx)
        return self.report

    def _flush(self, ctx: NodeContext) -> None:
        """The node's state file catches up: before a look or a change on the node (a node
        that hangs there shows as running the step), and at the end of the run."""
        if not self.run.check:
            ctx.state.flush()

    def _gate_all(self) -> None:
        """Laptop-side refusals before any login: a BadInputError (the Hub's gate) leaves the
        run with nothing touched and exits 2. Any other error is left to prepare, which meets
        it again and records it on every node as a failed step."""
        for step in self.steps:
            try:
                step.gate(self.run)
            except BadInputError:
                raise
            except K3Error:
                return

    def _prepare_all(self) -> bool:
        """Every step settles its laptop-side inputs first (a revision, a key), so the first
        round trip can look at everything every step needs."""
        for step in self.steps:
            try:
                step.prepare(self.run)
            except K3Error as err:
                status = Status.INTERRUPTED if isinstance(err, Interrupted) else Status.FAILED
                for ctx in self.contexts:
                    self._record(ctx, step, StepResult(status, error=err.lines()))
                return False
        return True

    # -- connection and identity ---------------------------------------------------------
    def _identified(self, ctx: NodeContext, values: F.Found, step: AnyStep) -> None:
        """Which machine the node is, from its first look (inside `step`, so a node that hangs
        there shows as running it). A replaced machine's old state is gone, and with it the
        record that `step` runs: it is recorded again."""
        if identity.record(ctx, values) and not self.run.check:
            ctx.state.begin(step.label, step.inputs_digest(ctx))

    def _fail_nodes(self, errors: dict[str, K3Error]) -> None:
        """A node that cannot be logged in to fails every step of the run."""
        for name, err in errors.items():
            status = (Status.UNREACHABLE if isinstance(err, UnreachableError) else
                      Status.INTERRUPTED if isinstance(err, Interrupted) else Status.FAILED)
            for step in self.steps:
                self.report.set(name, step.label, StepResult(status, error=err.lines()))
            self._say(name, None, status, err.lines())

    # -- one step ------------------------------------------------------------------------
    def _targets(self, step: AnyStep) -> list[NodeContext]:
        if step.runs_after_failures:
            gone = {n for n, per in self.report.results.items()
                    if any(r.status == Status.UNREACHABLE for r in per.values())}
        else:
            gone = self.report.failed_nodes()
        return [c for c in self.contexts if c.name not in gone]

    def _run_step(self, step: AnyStep) -> bool:
        """Returns False when the playbook must stop here."""
        targets = self._targets(step)
        if step.needs_all_nodes and len(targets) < len(self.contexts):
            self._block(step, targets)
            return False
        if not targets:
            return False
        if step.settles:
            looked = fan.run_each(lambda c: self.observer.peek(step, c), targets,
                                  key=lambda c: c.name)
            # A node that failed: its own step says.
            decided = step.settle(looked.succeeded, self.run)
            if decided is not None:
                self.run.ledger.decide(decided)
        all_facts = self._fan_out(step, targets)
        if any(self.report.results.get(c.name, {}).get(step.label, StepResult(Status.OK)).status
               == Status.CHANGED for c in targets):
            self.observer.changed()
        if interrupt.requested():  # what a cut-short step saw is no basis for cluster checks
            return False
        try:
            return self._after_step(step, all_facts)
        except Interrupted:  # during the cluster probes (preflight's port mesh)
            return False

    def _block(self, step: AnyStep, targets: list[NodeContext]) -> None:
        bad = sorted(self.report.failed_nodes())
        msg = [f"not run on any node: {', '.join(bad)} failed earlier and {step.name} needs "
               "every node"]
        for ctx in targets:
            self._record(ctx, step, StepResult(Status.BLOCKED, error=msg))

    def _fan_out(self, step: AnyStep, targets: list[NodeContext]) -> dict[str, object]:
        all_facts: dict[str, object] = {}
        for n, group in enumerate(_groups(step, targets)):
            all_facts.update(fan.run_each(lambda c: self._on_node(step, c), group,
                                          key=lambda c: c.name).unwrapped())
            while self._blamed:
                self.report.set(*self._blamed.pop())
            if n == 0 and step.head_first and self.report.results.get(group[0].name, {}).get(
                    step.label, StepResult(Status.OK)).status not in SETTLED:
                break   # the head failed: the others have nothing to join
        return all_facts

    def _after_step(self, step: AnyStep, all_facts: dict[str, object]) -> bool:
        usable = {n: f for n, f in all_facts.items() if f is not None}
        if usable:
            usable = look_across(step, usable, {c.name: c for c in self.contexts}, self.run)
            self._keep_cluster_detail(step, usable)
        problems = step.cluster_problems(usable, self.run) if usable else []
        for node, check, message in problems:
            self.report.problems.append((node, check, message))
        if step.read_only and self.report.problems:
            return False
        if self.run.ui and not self.run.check and not self.report.failed_nodes():
            for line in step.closing_lines(self.run, usable):
                klog.get(step=step.label).log(self.event_level, "step.message", text=line)
                self.run.ui.say(line)
        return not (step.needs_all_nodes and self.report.failed_nodes())

    def _keep_cluster_detail(self, step: AnyStep, usable: dict[str, object]) -> None:
        detail = step.cluster_detail(usable, self.run)
        head = next((c for c in self.contexts if c.is_head), None)
        if detail is not None and head is not None and not self.run.check:
            head.state.add_detail(step.label, detail)

    # -- one node ------------------------------------------------------------------------
    def _on_node(self, step: AnyStep, ctx: NodeContext) -> object | None:
        started, culprit, theirs = time.monotonic(), None, Status.FAILED
        if not self.run.check:
            ctx.state.begin(step.label, step.inputs_digest(ctx))
        try:
            facts, result = self._contract(step, ctx)
        except Interrupted as err:
            facts, result = None, StepResult(Status.INTERRUPTED, error=err.lines())
        except UnreachableError as err:
            facts, result = None, StepResult(Status.UNREACHABLE, error=err.lines())
            if err.node != ctx.name:   # the head's look at another rank: that rank is gone
                culprit, theirs, result.status = err.node, Status.UNREACHABLE, Status.FAILED
        except K3Error as err:
            facts, result = None, StepResult(Status.FAILED, error=_lines(err, step.name))
            culprit = getattr(err, "node", None)
            if self._pending(ctx):
                # --check: this step looks at what earlier steps would have changed; it cannot
                # be judged before they run (Ansible's check mode has the same limit).
                result = StepResult(Status.WOULD_CHANGE, actions=[
                    f"depends on the changes above; not judged in --check ({err})"])
        result.seconds = time.monotonic() - started
        self._record(ctx, step, result, facts)
        if result.status == Status.FAILED and culprit != ctx.name and culprit in self.report.results:
            # The head's wait found the fault on another node: the summary points there too.
            self._blamed.append((culprit, step.label, StepResult(theirs, error=result.error)))
        return facts

    def _pending(self, ctx: NodeContext) -> bool:
        return self.run.check and any(r.status == Status.WOULD_CHANGE
                                      for r in self.report.results.get(ctx.name, {}).values())

    def _decide(self, step: AnyStep,
                ctx: NodeContext) -> tuple[object, list[tuple[str, str]], list[Action]]:
        """(facts, problems, actions). Facts looked at ahead of time (an earlier step's batch)
        only prove that there is nothing to do; anything to do or to report is decided again
        on a look made now."""
        facts, fresh = self.observer.facts(step, ctx)
        if not fresh:
            try:
                if not step.problems(facts, ctx) and not step.plan(facts, ctx):
                    return facts, [], []
            except K3Error as err:   # decided again below, on a look made now; said in the log
                ctx.log(step.label).log(self.event_level, "step.look_ahead_failed",
                                        error=redact(str(err)), kind=type(err).__name__)
            facts, _ = self.observer.facts(step, ctx, fresh=True)
        found = step.problems(facts, ctx)
        return facts, found, [] if found else step.plan(facts, ctx)

    def _contract(self, step: AnyStep, ctx: NodeContext) -> tuple[object, StepResult]:
        facts, found, actions = self._decide(step, ctx)
        if found and self._pending(ctx):
            return facts, StepResult(Status.WOULD_CHANGE, actions=[
                "depends on the changes above; not judged in --check"])
        for check, message in found:
            self.report.problems.append((ctx.name, check, message))
        if found:  # the details go into the problems table printed at the end
            return facts, StepResult(Status.FAILED, error=[f"{len(found)} problem(s): "
                                                      + ", ".join(sorted({c for c, _ in found}))])
        shown = [a.shown() for a in actions]
        if not actions:
            return facts, StepResult(Status.OK)
        if self.run.check:
            return facts, StepResult(Status.WOULD_CHANGE, actions=shown)
        self._flush(ctx)
        step.apply(ctx, actions)
        facts, left = step.recheck(ctx)
        if left:
            raise StepFailed(ctx.name, "applied, but the node is still not as the step promises; "
                             f"still needed: {'; '.join(left)}", step=step.name)
        # Like Ansible, "changed" is about the node: saving its logs on the laptop is not.
        changed = any(not a.on_laptop for a in actions)
        return facts, StepResult(Status.CHANGED if changed else Status.OK, actions=shown)

    def _record(self, ctx: NodeContext, step: AnyStep, result: StepResult,
                facts: object = None) -> None:
        self.report.set(ctx.name, step.label, result)
        if not self.run.check and result.status != Status.BLOCKED:
            detail = step.detail(facts, ctx) if facts is not None and result.status in SETTLED else None
            ctx.state.finish(step.label, result.status,
                             error=redact("\n".join(result.error)) or None, detail=detail)
        self._say(ctx.name, step.label, result.status, result.error, result.actions)

    def _say(self, node: str, step: str | None, status: Status, error: Sequence[str] = (),
             actions: Sequence[str] = ()) -> None:
        klog.get(node=node, step=step).log(self.event_level, "step.result", status=status,
                                           actions=list(actions), error=list(error))
        if self.run.ui:
            self.run.ui.step_result(node, step, status, list(error), list(actions))


def _groups(step: AnyStep, targets: list[NodeContext]) -> list[list[NodeContext]]:
    """The nodes in the order the step wants them: all at once; the head, then the others at
    once (`head_first`); or the head, then the others one after another (`one_by_one`)."""
    if not step.head_first:
        return [targets]
    head, others = [c for c in targets if c.is_head], [c for c in targets if not c.is_head]
    return [g for g in [head, *([[c] for c in others] if step.one_by_one else [others])] if g]


def _lines(err: K3Error, step: str) -> list[str]:
    if isinstance(err, NodeError) and err.step is None:
        err.step = step
    return err.lines()


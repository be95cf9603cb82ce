"""What `up` adds after its summary table: how long the bring-up took and what it cost, and
the bring-up certificate once verify has passed (over the run's own connections). A run that
failed gets neither (run_steps says where it failed); a run that changed nothing says so and
keeps the certificate of the bring-up it found."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Mapping
from typing import NotRequired, TypedDict, cast

from k3deploy.cluster import cost
from k3deploy.cluster.cost import CostSummary
from k3deploy.cluster.inventory import Inventory
from k3deploy.core.jsonvalue import JSON
from k3deploy.node.context import RunContext
from k3deploy.run.report import RunReport
from k3deploy.run.outcome import did_something
from k3deploy.serving import certificate
from k3deploy.facts.guard import Incident
from k3deploy.steps.guard import RELAUNCHED_AFTER


class Relaunch(TypedDict):
    after: str | None                 # what stopped the group (the first failure's cause)
    incident_at: str
    relaunch_seconds: float
    incident_to_serving_seconds: float | None


class Bringup(TypedDict):
    """A bring-up's time and cost, as the certificate keeps it."""
    started: float
    finished: float
    seconds: float
    cost: CostSummary | None
    relaunch: NotRequired[Relaunch]


def bringup_record(inv: Inventory, started: float, finished: float,
                   incidents: Mapping[str, object] | None = None) -> Bringup:
    record: Bringup = {"started": started, "finished": finished,
              "seconds": round(finished - started, 1),
              "cost": cost.summary(inv, finished - started)}
    relaunch = relaunch_record(incidents or {}, started, finished)
    return {**record, "relaunch": relaunch} if relaunch else record


def relaunch_record(incidents: Mapping[str, object], started: float,
                    finished: float) -> Relaunch | None:
    """A bring-up that archived the guard's incident relaunched the group: what stopped it and
    how long from the incident (its first record) to serving again."""
    found = [i for i in incidents.values() if isinstance(i, Incident) and i.recorded_at]
    if not found:
        return None
    first = min(found, key=lambda i: i.recorded_at)
    at = _epoch(first.recorded_at)
    return {"after": first.failure.cause if first.failure else None,
            "incident_at": first.recorded_at,
            "relaunch_seconds": round(finished - started, 1),
            "incident_to_serving_seconds": round(finished - at, 1) if at else None}


def _epoch(stamp: str) -> float | None:
    try:
        return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def cost_line(record: Bringup) -> str:
    took = f"bring-up took {cost.duration(record['seconds'])}"
    c = record["cost"]
    if c is None:
        return took + " (set price: {per_gpu_hour: ..} in the inventory to see its cost)"
    return (f"{took}: {cost.money(c['spent'], c['currency'])} for {c['gpus']} GPUs at "
            f"{cost.money(c['per_gpu_hour'], c['currency'])}/GPU-hour; the cluster burns "
            f"{cost.money(c['per_hour'], c['currency'])}/hour while it is up, idle or not")


def closing_for() -> Callable[[RunContext, RunReport], list[str]]:
    """The `after` hook for run_steps, started now (the bring-up's clock starts here)."""
    started = time.time()

    def closing(run: RunContext, report: RunReport) -> list[str]:
        if run.check:
            return []
        if report.exit_code() != 0:
            return []
        kept = certificate.latest(run.session.state_dir)
        if not did_something(report) and kept:
            return [f"nothing to do: every step was already done on every node; the "
                    f"certificate stays {kept}"]
        from k3deploy.cli.certificate_cmd import write_after_up
        record = bringup_record(run.inv, started, time.time(), run.ledger.notes(RELAUNCHED_AFTER))
        # the record is JSON as the certificate writes it: TypedDicts of JSON values, no tuples
        return [cost_line(record), write_after_up(run.session, run.inv, cast(dict[str, JSON], record))]
    return closing

"""The cost lines of `k3deploy status`: time since the engine was launched (the earliest
running container's start), what that time cost, and what the cluster burns per hour
whether it serves or idles. Pure: the status document and the clock in."""

from __future__ import annotations

import calendar
import time

from k3deploy.cli.status_doc import CostView, NodeDoc
from k3deploy.cluster import cost
from k3deploy.cluster.inventory import Inventory
from k3deploy.facts.docker import GO_ZERO_TIME


def parse_started(text: str | None) -> float | None:
    """Docker's RFC 3339 StartedAt (nanoseconds, UTC) as epoch seconds."""
    if not text or text == GO_ZERO_TIME:
        return None
    try:
        return calendar.timegm(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def launched_at(nodes: dict[str, NodeDoc]) -> float | None:
    containers = [info["live"].get("container") or {} for info in nodes.values()]
    starts = [parse_started(started if isinstance(started := c.get("started"), str) else None)
              for c in containers if c.get("running")]
    found = [s for s in starts if s is not None]
    return min(found) if found else None


def view(inv: Inventory, nodes: dict[str, NodeDoc], now: float) -> CostView | None:
    launched = launched_at(nodes)
    since = None if launched is None else now - launched
    out = cost.summary(inv, since or 0)
    if out is None:   # no price in the inventory
        return None
    return {**out, "launched_at": launched, "seconds_since_launch": since,
            "spent": out["spent"] if since is not None else None}


def line(c: CostView | None) -> str:
    if c is None:
        return "cost: no price in the inventory (price: {per_gpu_hour: 2.49, currency: USD})"
    burn = (f"burns {cost.money(c['per_hour'], c['currency'])}/hour idle or busy "
            f"({c['gpus']} GPUs x {cost.money(c['per_gpu_hour'], c['currency'])}/GPU-hour)")
    since, spent = c["seconds_since_launch"], c["spent"]
    if since is None or spent is None:
        return f"cost: no engine running; while the nodes are rented the cluster {burn}"
    # Within status's 100 columns at any realistic figure.
    return (f"cost: launched {cost.duration(since)} ago, "
            f"{cost.money(spent, c['currency'])} since; {burn}")

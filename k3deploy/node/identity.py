"""First contact with every node: log in, then learn which machine it is.

A node that answers with another machine-id or boot-id than last time is a different machine
(spot replacement, reboot into a fresh image): its old state file is discarded. The identity
is read in the run's first look at the node (run/observer.py), not in a round trip of its own.
"""

from __future__ import annotations


from collections.abc import Iterable

from k3deploy.node import facts as F
from k3deploy.node.context import NodeContext
from k3deploy.core import group
from k3deploy.core.errors import K3Error

IDENTITY = [
    F.command("machine_id", ["cat", "/etc/machine-id"]),
    F.command("boot_id", ["cat", "/proc/sys/kernel/random/boot_id"]),
]


def connect_all(contexts: Iterable[NodeContext]) -> dict[str, K3Error]:
    """Every node's login at once; the nodes that failed, with why (unreachable, or a host
    key we must not trust)."""
    found = group.run_each(lambda ctx: ctx.conn.open(), contexts, key=lambda c: c.name)
    return found.failures(K3Error)


def record(ctx: NodeContext, values: F.Found) -> bool:
    """The node's answer to IDENTITY, kept in its state; True when the node turned out to be
    another machine and its old state was discarded."""
    # IDENTITY's facts parse to text; a node that did not answer has none
    replaced = ctx.state.check_identity({f.name: v if isinstance(v := values.get(f.name), str) else None
                                         for f in IDENTITY})
    if replaced:
        ctx.log().warning("node.replaced", msg="machine-id/boot-id changed: old state discarded")
    return replaced

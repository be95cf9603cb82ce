"""First contact with every node: log in, then learn which machine it is.

A node that answers with another machine-id or boot-id than last time is a different machine
(spot replacement, reboot into a fresh image): its old state file is discarded.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from k3deploy.node import facts as F
from k3deploy.core.errors import K3Error

IDENTITY = [
    F.command("machine_id", ["cat", "/etc/machine-id"]),
    F.command("boot_id", ["cat", "/proc/sys/kernel/random/boot_id"]),
]


def _each(contexts, work) -> dict[str, K3Error]:
    """work(ctx) on every node at once; the nodes where it raised, with what."""
    def one(ctx) -> K3Error | None:
        try:
            work(ctx)
        except K3Error as err:  # unreachable, or a host key we must not trust
            return err
        return None
    if not contexts:
        return {}
    with ThreadPoolExecutor(max_workers=min(32, len(contexts))) as pool:
        errors = dict(zip([c.name for c in contexts], pool.map(one, contexts)))
    return {name: err for name, err in errors.items() if err is not None}


def connect_all(contexts) -> dict[str, K3Error]:
    return _each(contexts, lambda ctx: ctx.conn.open())


def identify_all(contexts, look=None) -> dict[str, K3Error]:
    """look(ctx) returns the IDENTITY values, possibly read in a round trip that looks at more
    (the runner's first look); by default a round trip of its own."""
    def identify(ctx) -> None:
        values = look(ctx) if look else F.gather(ctx.conn, IDENTITY)
        if ctx.state.check_identity(values):
            ctx.log().warning("node.replaced", msg="machine-id/boot-id changed: old state discarded")
        if not ctx.run.check:
            ctx.state.save()
    return _each(contexts, identify)

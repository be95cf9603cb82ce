"""First contact with every node: connect once and learn which machine it is.

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


def _identify(ctx) -> K3Error | None:
    try:
        ctx.conn.open()
        values = F.gather(ctx.conn, IDENTITY)
    except K3Error as err:  # unreachable, or a host key we must not trust
        return err
    if ctx.state.check_identity(values):
        ctx.log().warning("node.replaced", msg="machine-id/boot-id changed: old state discarded")
    if not ctx.run.check:
        ctx.state.save()
    return None


def check_identities(contexts) -> dict[str, K3Error]:
    if not contexts:
        return {}
    with ThreadPoolExecutor(max_workers=min(32, len(contexts))) as pool:
        errors = dict(zip([c.name for c in contexts], pool.map(_identify, contexts)))
    return {name: err for name, err in errors.items() if err is not None}

"""A Hugging Face cache on one shared volume (`download.shared`): which node writes it, and
whether every node sees the same volume.

The guide's step 2 alternative to local NVMe: one volume mounted at `paths.hf_home` on every
node. The head alone downloads into it; the others wait and verify what they see. Whether a
node really sees the head's volume is told by a marker file: the nvme step writes it on the
head, and every other node must read the same text at the same path. A node where the mount is
missing sees its own (empty) directory there and no marker.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from typing import Protocol

from k3deploy.cluster.inventory import Inventory
from k3deploy.core.errors import StepFailed
from k3deploy.node import facts as F
from k3deploy.node.context import NodeContext, RunContext
from k3deploy.steps.base import Action, AnyFact, upload

MARKER = ".k3deploy-shared-volume"
FACT = "shared_marker"


class SeesMarker(Protocol):
    """The facts of a step that reads the marker (marker_fact): its field of the fact's name,
    '' when the marker is absent, None when the step did not read it (no shared cache)."""

    @property
    def shared_marker(self) -> str | None: ...


def shared(inv: Inventory) -> bool:
    return bool(inv.download.shared)


def writer(inv: Inventory, name: str) -> bool:
    """The one node that downloads into the cache (every node, without a shared cache)."""
    return not shared(inv) or inv.is_head(name)


def marker_path(inv: Inventory) -> str:
    return os.path.join(inv.paths.hf, MARKER)


def marker_text(inv: Inventory) -> str:
    return (f"k3deploy shared HF cache of cluster {inv.cluster}, written by its head "
            f"{inv.head.name}\n")


def marker_fact(inv: Inventory) -> list[AnyFact]:
    """The marker as this node reads it ('' when absent); nothing without a shared cache."""
    if not shared(inv):
        return []
    path = shlex.quote(marker_path(inv))
    return [F.Fact(FACT, f"cat {path} 2>/dev/null || true", F.text)]


def volume_free_fact(inv: Inventory) -> list[AnyFact]:
    """On the head: free bytes of the filesystem the cache goes to (its nearest existing
    ancestor: before the first bring-up the cache dir under the mount point is not made yet)."""
    if not shared(inv):
        return []
    path = shlex.quote(inv.paths.hf)
    script = (f'p={path}; while [ ! -e "$p" ]; do p=$(dirname "$p"); done; '
              'df -B1 --output=avail "$p" | tail -n 1')
    return [F.Fact("volume_free_bytes", script, F.integer)]


def sees_marker(facts: SeesMarker, inv: Inventory) -> bool:
    return (facts.shared_marker or "").strip() == marker_text(inv).strip()


def write_marker(facts: SeesMarker, node: NodeContext) -> list[Action]:
    """On the head: the marker, when it is not there yet (after the cache dir exists)."""
    inv = node.inv
    if not shared(inv) or not inv.is_head(node.name) or sees_marker(facts, inv):
        return []
    return [upload(f"mark the shared HF cache ({MARKER})", marker_path(inv), marker_text(inv),
                   mode=0o644, sudo=True)]


def mount_missing(inv: Inventory, name: str) -> str:
    return (f"does not see the shared HF cache: {marker_path(inv)} (written by the head "
            f"{inv.head.name}) is not there; mount the shared volume at {inv.paths.hf} on "
            f"{name}, as on the head (or, if {name}'s mount is right, the head's is missing)")


def require_marker(facts: SeesMarker, node: NodeContext, step: str) -> None:
    """On a node that is not the head: fail, naming it, when it does not see the head's volume
    (its downloader would wait forever, or write a second copy on its own disk). Not under
    --check: there the head's nvme step wrote no marker yet (preflight names a missing one)."""
    if not node.run.check and not sees_marker(facts, node.inv):
        raise StepFailed(node.name, mount_missing(node.inv, node.name), step=step,
                         hint="check `mount` and `df` of that path on the node, then re-run")


def marker_problems(all_facts: Mapping[str, SeesMarker],
                    run: RunContext) -> list[tuple[str, str, str]]:
    """Preflight: once the head sees its marker, every node that does not is named. Before the
    first bring-up no node has it yet, and nothing can be told."""
    inv = run.inv
    head = all_facts.get(inv.head.name)
    if not shared(inv) or head is None or not sees_marker(head, inv):
        return []
    return [(name, "shared-hf", mount_missing(inv, name))
            for name, facts in all_facts.items() if not sees_marker(facts, inv)]

"""What the download step tells the user: where the weights came from (Hub against peers), the
peers that served bad bytes, and the fix for a failed download."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from k3deploy.core import units
from k3deploy.core.errors import DiskError
from k3deploy.core.jsonvalue import JSON
from k3deploy.facts.download import DiskFault, WeightsStatus
from k3deploy.node.context import RunContext
from k3deploy.steps.base import settled
from k3deploy.steps.weights import shared_hf


@dataclass(frozen=True)
class Detail:
    """What the download keeps in a node's state file: the files verified and where this
    node's last downloader run got its bytes (None: no run reported them)."""
    sha: str | None
    files: int
    verified: int
    verified_bytes: float   # byte counts: ints as the downloader reports them, any number read back
    hub_bytes: float | None
    peer_bytes: float | None
    bad_peers: tuple[str, ...]

    @classmethod
    def of(cls, status: WeightsStatus, sha: str | None) -> Detail:
        run = status.progress
        return cls(sha=sha, files=status.total, verified=status.total - status.missing_count,
                   verified_bytes=status.verified_bytes,
                   hub_bytes=run.hub_bytes if run else None,
                   peer_bytes=run.peer_bytes if run else None,
                   bad_peers=run.bad_peers if run else ())

    def document(self) -> dict[str, JSON]:
        """As the state file keeps it (JSON)."""
        return {"sha": self.sha, "files": self.files, "verified": self.verified,
                "verified_bytes": self.verified_bytes, "hub_bytes": self.hub_bytes,
                "peer_bytes": self.peer_bytes, "bad_peers": list(self.bad_peers)}

    @classmethod
    def from_state(cls, doc: Mapping[str, JSON]) -> Detail:
        """A state file's record (`document`'s); a node without one (the step failed there)
        counts nothing."""
        sha, peers = doc.get("sha"), doc.get("bad_peers")
        return cls(sha=sha if isinstance(sha, str) else None, files=_count(doc, "files") or 0,
                   verified=_count(doc, "verified") or 0,
                   verified_bytes=_number(doc, "verified_bytes") or 0,
                   hub_bytes=_number(doc, "hub_bytes"), peer_bytes=_number(doc, "peer_bytes"),
                   bad_peers=tuple(p for p in peers if isinstance(p, str))
                   if isinstance(peers, list) else ())


def _count(doc: Mapping[str, JSON], key: str) -> int | None:
    """A count `document` wrote (a bool is none: JSON's true is not a count)."""
    value = doc.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(doc: Mapping[str, JSON], key: str) -> float | None:
    """A byte count `document` wrote, as read back (an int, or any JSON number)."""
    value = doc.get(key)
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def kept(run: RunContext, label: str) -> list[Detail]:
    """Each node's record of the step under `label`, in inventory order."""
    return [Detail.from_state(run.session.states[n.name].step(label).get("detail") or {})
            for n in run.inv.nodes]


def closing_lines(run: RunContext, details: list[Detail]) -> list[str]:
    """After the download: where the bytes came from, the shared copy, peers that served bad bytes."""
    lines = [hub_summary(details, settled(run.inputs.manifest, "manifest").total_bytes)]
    if shared_hf.shared(run.inv):
        lines.append(f"weights: one copy on the shared volume {run.inv.paths.hf}, "
                     f"downloaded by the head {run.inv.head.name}; every node verified it")
    seen = {n.name: d.bad_peers for n, d in zip(run.inv.nodes, details)}
    for bad in sorted({p for found in seen.values() for p in found}):
        by = ", ".join(n for n, found in seen.items() if bad in found)
        lines.append(f"peer {bad} served bytes failing their checksum (seen by {by}); those "
                     "files came from the Hub: check that node's disk and memory")
    return lines


def hub_summary(details: list[Detail], repo_bytes: int) -> str:
    hub = sum(d.hub_bytes or 0 for d in details)
    peer = sum(d.peer_bytes or 0 for d in details)
    return (f"weights: the Hub served {units.size(hub)} for a {units.size(repo_bytes)} repo "
            f"({hub / max(1, repo_bytes):.2f}x), peers {units.size(peer)} (each node's last "
            "downloader run)")


def disk_error(node: str, step: str, disk: DiskFault, inventory: str) -> DiskError:
    """The downloader's DiskFault (its progress document's `disk`) as the error the CLI prints."""
    needed, free = disk.needed, disk.free
    space = f"; {units.size(needed)} still needed, {units.size(free)} free" \
        if needed is not None and free is not None else ""
    short = f"at least {units.size(needed - free)} " \
        if needed is not None and free is not None and needed > free else ""
    return DiskError(node, f"download stopped: the node's disk refused a write: {disk.path}: "
                     f"{disk.reason}{space}", step=step,
                     hint=f"free {short}on {node}'s filesystem of that path (or grow the disk), then re-run "
                     f"`k3deploy up -i {inventory}`: verified files and partial bytes are kept")


def failed_hint(error: str, inventory: str) -> str:
    rerun = (f"re-run `k3deploy run resume-download -i {inventory}` (or `up`): verified files "
             "and partial bytes are kept")
    if "mismatch" in error:
        return ("the Hub (model.endpoint) served a file whose checksum does not match its own "
                "metadata, on every retry: a broken upload or a proxy altering it; fix or change "
                f"the endpoint, then {rerun}")
    return rerun

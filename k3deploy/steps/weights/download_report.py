"""What the download step tells the user: where the weights came from (Hub against peers), the
peers that served bad bytes, and the fix for a failed download."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

from k3deploy.core import units
from k3deploy.core.errors import DiskError
from k3deploy.facts.download import DiskFault, WeightsStatus
from k3deploy.node.context import RunContext
from k3deploy.steps.weights import shared_hf


@dataclass(frozen=True)
class Detail:
    """What the download keeps in a node's state file: the files verified and where this
    node's last downloader run got its bytes (None: no run reported them)."""
    sha: str | None
    files: int
    verified: int
    verified_bytes: int
    hub_bytes: int | None
    peer_bytes: int | None
    bad_peers: tuple[str, ...]

    @classmethod
    def of(cls, status: WeightsStatus, sha: str | None) -> Detail:
        run = status.progress
        return cls(sha=sha, files=status.total, verified=status.total - status.missing_count,
                   verified_bytes=status.verified_bytes,
                   hub_bytes=run.hub_bytes if run else None,
                   peer_bytes=run.peer_bytes if run else None,
                   bad_peers=run.bad_peers if run else ())

    def document(self) -> dict:
        """As the state file keeps it (JSON)."""
        return {**asdict(self), "bad_peers": list(self.bad_peers)}

    @classmethod
    def from_state(cls, doc: Mapping) -> Detail:
        """A state file's record; a node without one (the step failed there) counts nothing."""
        return cls(sha=doc.get("sha"), files=doc.get("files") or 0,
                   verified=doc.get("verified") or 0, verified_bytes=doc.get("verified_bytes") or 0,
                   hub_bytes=doc.get("hub_bytes"), peer_bytes=doc.get("peer_bytes"),
                   bad_peers=tuple(doc.get("bad_peers") or ()))


def kept(run: RunContext, label: str) -> list[Detail]:
    """Each node's record of the step under `label`, in inventory order."""
    return [Detail.from_state(run.session.states[n.name].step(label).get("detail") or {})
            for n in run.inv.nodes]


def closing_lines(run: RunContext, details: list[Detail]) -> list[str]:
    """After the download: where the bytes came from, the shared copy, peers that served bad bytes."""
    lines = [hub_summary(details, run.inputs.manifest.total_bytes)]
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

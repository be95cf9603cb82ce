"""What the download step tells the user: where the weights came from (Hub against peers), the
peers that served bad bytes, and the fix for a failed download."""

from __future__ import annotations

from k3deploy.steps import shared_hf
from k3deploy.core import units
from k3deploy.core.errors import DiskError


def closing_lines(run, details: list[dict]) -> list[str]:
    """After the download: where the bytes came from, the shared copy, peers that served bad bytes."""
    lines = [hub_summary(details, run.inputs.manifest.total_bytes)]
    if shared_hf.shared(run.inv):
        lines.append(f"weights: one copy on the shared volume {run.inv.paths.hf}, "
                     f"downloaded by the head {run.inv.head.name}; every node verified it")
    seen = {n.name: d.get("bad_peers") or [] for n, d in zip(run.inv.nodes, details)}
    for bad in sorted({p for found in seen.values() for p in found}):
        by = ", ".join(n for n, found in seen.items() if bad in found)
        lines.append(f"peer {bad} served bytes failing their checksum (seen by {by}); those "
                     "files came from the Hub: check that node's disk and memory")
    return lines


def hub_summary(details: list[dict], repo_bytes: int) -> str:
    hub = sum(d.get("hub_bytes") or 0 for d in details)
    peer = sum(d.get("peer_bytes") or 0 for d in details)
    return (f"weights: the Hub served {units.size(hub)} for a {units.size(repo_bytes)} repo "
            f"({hub / max(1, repo_bytes):.2f}x), peers {units.size(peer)} (each node's last "
            "downloader run)")


def disk_error(node: str, step: str, disk: dict, inventory: str) -> DiskError:
    """The downloader's DiskFault (its progress document's `disk`) as the error the CLI prints."""
    needed, free = disk.get("needed"), disk.get("free")
    space = f"; {units.size(needed)} still needed, {units.size(free)} free" if needed is not None else ""
    short = f"at least {units.size(needed - free)} " if needed is not None and needed > free else ""
    return DiskError(node, f"download stopped: the node's disk refused a write: {disk.get('path')}: "
                     f"{disk.get('reason')}{space}", step=step,
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

"""What the dry-fire steps share (steps/dry_fire/dry_fire.py, steps/dry_fire/dry_fire_verdict.py): whether a
run has one, where a node keeps a passed dry-fire's report, the small files it waits for."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from k3deploy.cluster.hubmeta import Manifest, small_files
from k3deploy.cluster.inventory import Inventory
from k3deploy.node import facts as F
from k3deploy.node.context import RunContext
from k3deploy.remote import protocol
from k3deploy.remote.protocol import WorkPaths

SMALL_FILES = "config, tokenizer and the model's code are on the node"
HINT = ("the weights keep downloading (`k3deploy status` shows how far); fix what the engine "
        "names, then re-run `k3deploy up` (its dry-fire runs again; `--no-dry-fire` skips it)")


def skipped(run: RunContext) -> str | None:
    """Why this run has no dry-fire, or None."""
    if run.option("no_dry_fire"):
        return "--no-dry-fire"
    if len(run.inv.nodes) < 2:
        return "one node: the real launch tells as quickly"
    return None


def report_path(inv: Inventory, config: str) -> str:
    """The node's record of a passed dry-fire of one configuration (its config label)."""
    return f"{WorkPaths(inv.paths.work).work}/dry-fire/{config}.json"


def _words(out: str, _code: int) -> tuple[str, ...]:
    return tuple(out.split())


def passed_fact(inv: Inventory) -> F.Fact[tuple[str, ...]]:
    """The configurations (config labels) a dry-fire passed with on this node."""
    folder = shlex.quote(report_path(inv, "x").rsplit("/", 1)[0])
    script = f"ls {folder} 2>/dev/null | sed -n 's/\\.json$//p'; true"
    return F.Fact("dry_fire_passed", script, _words, sudo=True)


@dataclass(frozen=True)
class PassedEverywhere:
    """Whether every node kept the report of a passed dry-fire of its own configuration (a
    run-wide decision; each rank's config label is its own).

    A dry-fire is one group: its verdict holds for the cluster only when every node kept its
    report. A run cut short between the nodes' reports (a disk that filled at one node's seal,
    a killed laptop) leaves the report on some nodes only: those nodes must fire again with the
    others, or the others' fresh ranks wait for a rank 0 left from the earlier group, which
    formed its group long ago and takes no new member."""

    everywhere: bool


def passed_everywhere(configs: Mapping[str, str | None],
                      reports: Mapping[str, tuple[str, ...]]) -> PassedEverywhere:
    """From each node's configuration to judge (None: nothing to judge there) and the
    configurations its reports name (passed_fact)."""
    return PassedEverywhere(all(config in reports.get(node, ())
                                for node, config in configs.items() if config is not None))


def passed_here(run: RunContext, config: str, reports: tuple[str, ...]) -> bool:
    """Whether a dry-fire of this node's configuration passed, as far as the node's plan may
    trust: the run's decision (every node's reports) once made, else the node's own reports."""
    decided = run.ledger.decided(PassedEverywhere)
    return decided.everywhere if decided is not None else config in reports


def missing_small_files(inv: Inventory, manifest: Manifest) -> F.Fact[tuple[str, ...]]:
    """The small files (hubmeta.small_files) not yet linked in the snapshot: the downloader
    links a file only once verified, so a present link is a complete file."""
    snap = protocol.snapshot_path(protocol.cache_storage(inv.paths.hf, inv.model.repo),
                                  manifest.sha, "")
    names = " ".join(shlex.quote(f.path) for f in small_files(manifest.files))
    script = (f"cd {shlex.quote(snap)} 2>/dev/null || {{ echo '*'; exit 0; }}; "
              f'for f in {names}; do [ -e "$f" ] || echo "$f"; done; true')
    return F.Fact("small_missing", script, _words, sudo=True)

"""What a run settles before its first look at a node and every step reads: the manifest, the
secrets, where its logs go.

Steps settle these in prepare() (only the steps a playbook runs need them: `down` never asks
the Hub for a manifest), through RunContext.settle, which refuses once the run has started:
from then on the inputs are frozen. What the run learns as it goes is the runner's, in
node/run_ledger.py.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TypedDict

from k3deploy.cluster.hubgate import HubReach
from k3deploy.cluster.hubmeta import Manifest


@dataclass(frozen=True)
class RunInputs:
    manifest: Manifest | None = None                     # the pinned revision (hubmeta)
    manifest_json: str | None = None                     # its JSON for the nodes, one copy per run
    hub_reach: HubReach | None = None                    # the gate check's answer (hubgate)
    api_key: str | None = field(default=None, repr=False)        # the endpoint's key, if any
    peer_secret: str | None = field(default=None, repr=False)    # fan-out's peer secret
    guard_secret: str | None = field(default=None, repr=False)   # the serve-time guard's
    logs_dir: Path | None = None                         # where collect-logs writes this run
    # The port mesh's sample of ephemeral ports (steps/checks/reachability.py), drawn once per run so
    # that deciding the mesh is a pure function of the facts and this.
    mesh_seed: int = field(default_factory=lambda: random.SystemRandom().getrandbits(32))
    token: str | None = field(default=None, repr=False)          # run_settle.hf_token
    # The fields settled so far: None is an answer too (no API key yet under --check).
    settled: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        # A value given when the inputs are made is settled too (a test's, a command's).
        given = {f.name for f in fields(self)
                 if f.name not in _NOT_INPUTS and getattr(self, f.name) is not None}
        object.__setattr__(self, "settled", self.settled | given)

    def has(self, name: str) -> bool:
        """Whether `name` is settled: given a value, or settled to None."""
        return name in self.settled


_NOT_INPUTS = {"settled", "mesh_seed"}


class Settled(TypedDict, total=False):
    """What RunContext.settle takes: RunInputs' inputs, by name."""
    manifest: Manifest | None
    manifest_json: str | None
    hub_reach: HubReach | None
    api_key: str | None
    peer_secret: str | None
    guard_secret: str | None
    logs_dir: Path | None
    token: str | None
    mesh_seed: int      # drawn when the inputs are made; settled again only by a test

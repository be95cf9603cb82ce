"""What a run settles once and every step reads: the manifest, the secrets, what it started.

Steps settle these in prepare() (only the steps a playbook runs need them: `down` never asks
the Hub for a manifest), so the holder is filled in as the run goes; each value is resolved
once and read by name, never looked up by a string key.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from k3deploy.cluster.hubgate import HubReach
from k3deploy.cluster.hubmeta import Manifest, token_from_env


@dataclass
class RunInputs:
    manifest: Manifest | None = None                     # the pinned revision (hubmeta)
    manifest_json: str | None = None                     # its JSON for the nodes, one copy per run
    hub_reach: HubReach | None = None                    # the gate check's answer (hubgate)
    api_key: str | None = field(default=None, repr=False)        # the endpoint's key, if any
    peer_secret: str | None = field(default=None, repr=False)    # fan-out's peer secret
    guard_secret: str | None = field(default=None, repr=False)   # the serve-time guard's
    logs_dir: Path | None = None                         # where collect-logs writes this run
    saved_logs: dict = field(default_factory=dict)       # node -> the files collect-logs wrote
    # node -> when (monotonic) this run's last start of its downloader had returned
    download_started: dict[str, float] = field(default_factory=dict)
    relaunched_after: dict = field(default_factory=dict)   # node -> the incident this up archived
    regroup: Any = None   # steps/regroup.Regroup: is the group relaunched whole (before launch)
    download_restarts: dict[str, int] = field(default_factory=dict)  # node -> restarts after a Hub failure
    # The port mesh's sample of ephemeral ports (steps/reachability.py), drawn once per run so
    # that deciding the mesh is a pure function of the facts and this.
    mesh_seed: int = field(default_factory=lambda: random.SystemRandom().getrandbits(32))
    token: str | None = field(default=None, repr=False)          # read through hf_token()
    token_read: bool = field(default=False, repr=False)

    def hf_token(self, env_var: str) -> str | None:
        """The Hugging Face token, read from the laptop's environment once per run."""
        if not self.token_read:
            self.token, self.token_read = token_from_env(env_var), True
        return self.token

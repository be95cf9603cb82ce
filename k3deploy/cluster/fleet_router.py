"""The `router:` section of a fleet inventory (cluster/fleet.py): where SMG runs and how. Apart
from fleet.py so that fleet_rules.py, which fleet.py runs, can name it without a cycle."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from k3deploy.cluster.inventory import Image, Name, Node, _Model

# smg-project/smg .github/workflows/release-docker.yml tags the image with the package version
# (and latest); pyproject.toml pins the same smg for the testbed, which runs this image for real.
SMG_IMAGE = "lightseekorg/smg:1.13.0"
# `smg launch --help` (smg 1.13.0): --policy's choices, default cache_aware.
Policy = Literal["random", "round_robin", "passthrough", "cache_aware", "power_of_two",
                 "least_load", "manual", "consistent_hashing", "prefix_hash"]


class RouterSpec(_Model):
    """Where SMG runs and how; the flags it becomes are SMG's (`smg launch --help`)."""
    # A node of some group by name, or an extra node (no GPUs, no rank). None: the first
    # group's head.
    node: Name | Node | None = None
    port: int = Field(default=30000, ge=1, le=65535)          # --port (SMG's default)
    metrics_port: int = Field(default=29000, ge=1, le=65535)  # --prometheus-port: always bound
    policy: Policy = "cache_aware"
    image: Image = SMG_IMAGE
    # --health-check-interval-secs (SMG: 60). 5: a dead group is not_ready after its 3 failed
    # checks, ~15 s, as a backstop to its guard, which takes it out first.
    health_check_interval: int = Field(default=5, ge=1, le=3600)

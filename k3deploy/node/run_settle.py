"""Each run input settled once, in a step's gate or prepare, and read by name afterwards.

Every helper reads the value when it is already settled; otherwise it works it out and
settles it (RunContext.settle), which only a run that has not started allows: a step that
needs an input must settle it in its prepare, before the first look at any node.
"""

from __future__ import annotations

import time
from pathlib import Path

from k3deploy.cluster import hubgate, hubmeta
from k3deploy.node import apikey, guard_config
from k3deploy.node.secretfile import peer_secret as _peer_secret


def hf_token(run) -> str | None:
    """The laptop's Hugging Face token, read from its environment once per run."""
    if not run.inputs.has("token"):
        run.settle(token=hubmeta.token_from_env(run.inv.hf_token_env))
    return run.inputs.token


def manifest(run) -> hubmeta.Manifest:
    """The pinned revision, resolved once per run: preflight (disk space) and download."""
    if not run.inputs.has("manifest"):
        inv = run.inv
        run.settle(manifest=hubmeta.resolve(inv.model.repo, inv.model.revision,
                                            inv.model.endpoint, hf_token(run),
                                            cache=run.session.state_dir / "hub-trees"))
    return run.inputs.manifest


def hub_reach(run) -> hubgate.HubReach:
    """The gate check, once per run (after the manifest: it names the file and the commit)."""
    if not run.inputs.has("hub_reach"):
        run.settle(hub_reach=hubgate.check(manifest(run), hf_token(run), run.inv.hf_token_env))
    return run.inputs.hub_reach


def api_key(run, create: bool = False) -> str | None:
    """The endpoint's key: made by launch (`create`), read by the steps that call the
    endpoint (launch, earlier in this run, may have settled it already)."""
    if not run.inputs.has("api_key"):
        run.settle(api_key=apikey.load_or_create(run.inv, run.session.state_dir, create=create))
    return run.inputs.api_key


def guard_secret(run) -> str | None:
    if not run.inputs.has("guard_secret"):
        run.settle(guard_secret=guard_config.load_or_create_secret(run.session.state_dir,
                                                                   create=not run.check))
    return run.inputs.guard_secret


def peer_secret(run) -> str:
    """--check changes nothing, here neither: without a secret yet, the plan shows the upload
    of one that matches no node's."""
    if not run.inputs.has("peer_secret"):
        run.settle(peer_secret=_peer_secret(run.session.state_dir, create=not run.check) or "")
    return run.inputs.peer_secret


def logs_dir(run) -> Path:
    """The one folder of this run's logs (from the clock once, not once per node thread)."""
    if not run.inputs.has("logs_dir"):
        out = run.option("out_dir") or run.session.state_dir / "logs" / time.strftime("%Y%m%d-%H%M%S")
        run.settle(logs_dir=Path(out))
    return run.inputs.logs_dir

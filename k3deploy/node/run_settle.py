"""Each run input settled once, in a step's gate or prepare, and read by name afterwards.

Every helper reads the value when it is already settled; otherwise it works it out and
settles it (RunContext.settle), which only a run that has not started allows: a step that
needs an input must settle it in its prepare, before the first look at any node.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TypeVar

from k3deploy.cluster import hubgate, hubmeta
from k3deploy.node import apikey, guard_config
from k3deploy.node.context import InputsSettled, RunContext
from k3deploy.node.secretfile import peer_secret as _peer_secret

T = TypeVar("T")


def hf_token(run: RunContext) -> str | None:
    """The laptop's Hugging Face token, read from its environment once per run."""
    if not run.inputs.has("token"):
        run.settle(token=hubmeta.token_from_env(run.inv.hf_token_env))
    return run.inputs.token


def manifest(run: RunContext) -> hubmeta.Manifest:
    """The pinned revision, resolved once per run: preflight (disk space) and download."""
    if not run.inputs.has("manifest"):
        inv = run.inv
        run.settle(manifest=hubmeta.resolve(inv.model.repo, inv.model.revision,
                                            inv.model.endpoint, hf_token(run),
                                            cache=run.session.state_dir / "hub-trees"))
    return _settled(run.inputs.manifest, "manifest")


def hub_reach(run: RunContext) -> hubgate.HubReach:
    """The gate check, once per run (after the manifest: it names the file and the commit)."""
    if not run.inputs.has("hub_reach"):
        run.settle(hub_reach=hubgate.check(manifest(run), hf_token(run), run.inv.hf_token_env))
    return _settled(run.inputs.hub_reach, "hub_reach")


def api_key(run: RunContext, create: bool = False) -> str | None:
    """The endpoint's key: made by launch (`create`), read by the steps that call the
    endpoint (launch, earlier in this run, may have settled it already)."""
    if not run.inputs.has("api_key"):
        run.settle(api_key=apikey.load_or_create(run.inv, run.session.state_dir, create=create))
    return run.inputs.api_key


def guard_secret(run: RunContext) -> str | None:
    if not run.inputs.has("guard_secret"):
        run.settle(guard_secret=guard_config.load_or_create_secret(run.session.state_dir,
                                                                   create=not run.check))
    return run.inputs.guard_secret


def peer_secret(run: RunContext) -> str:
    """--check changes nothing, here neither: without a secret yet, the plan shows the upload
    of one that matches no node's."""
    if not run.inputs.has("peer_secret"):
        run.settle(peer_secret=_peer_secret(run.session.state_dir, create=not run.check) or "")
    return _settled(run.inputs.peer_secret, "peer_secret")


def logs_dir(run: RunContext) -> Path:
    """The one folder of this run's logs (from the clock once, not once per node thread)."""
    if not run.inputs.has("logs_dir"):
        out = run.option("out_dir")
        if not out or not isinstance(out, (str, Path)):   # --out not given
            out = run.session.state_dir / "logs" / time.strftime("%Y%m%d-%H%M%S")
        run.settle(logs_dir=Path(out))
    return _settled(run.inputs.logs_dir, "logs_dir")


def _settled(value: T | None, name: str) -> T:
    """An input these helpers settle to a value, never to None (RunInputs types it optional:
    a run that has not settled it yet holds None)."""
    if value is None:
        raise InputsSettled(f"run input {name} was settled to None; it has a value once settled")
    return value

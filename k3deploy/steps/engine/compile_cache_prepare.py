"""The engines' compile caches on NVMe (engines/compile_cache_key.py; node side remote/compile_cache_dir.py).

The launch step mounts the dir of this launch's key and, right before it starts a container,
prepares it: a sealed dir is checked file by file (a corrupt one is removed, so the engine
rebuilds it and never loads it), a torn one removed, and a node without one takes the sealed
dir of a peer (a replaced or added node), checked the same way. `compile-cache-seal` runs
after verify: only a cache an engine verifiably served with is marked complete.
"""

from __future__ import annotations

import dataclasses
import shlex
from typing import Protocol

from k3deploy import engines
from k3deploy.cluster.fanout import peers_enabled
from k3deploy.cluster.inventory import Inventory
from k3deploy.engines import compile_cache_key as cc
from k3deploy.engines.spec import LaunchSpec
from k3deploy.facts import docker
from k3deploy.facts.nvidia_smi import Gpu
from k3deploy.node import facts as F
from k3deploy.node.context import NodeContext
from k3deploy.remote import script_text
from k3deploy.remote.protocol import PeerFiles, WorkPaths
from k3deploy.steps import node_files, probes
from k3deploy.steps.base import Action, AnyFact, cmd, upload

SCRIPT = "compile_cache_dir.py"


class KeyFacts(Protocol):
    """What the key is made of besides the launch's flags: key_probes' values, under their
    names (fields of the launch's Facts)."""

    @property
    def cuda(self) -> str | None: ...
    @property
    def driver(self) -> str | None: ...
    @property
    def gpus(self) -> tuple[Gpu, ...] | None: ...
    @property
    def images(self) -> dict[str, docker.Image]: ...
    @property
    def node_files(self) -> dict[str, str] | None: ...


def script_path(inv: Inventory) -> str:
    return f"{WorkPaths(inv.paths.work).work}/{SCRIPT}"


def key_probes(inv: Inventory) -> list[AnyFact]:
    """What the key is made of besides the launch's flags (batched with the launch's look)."""
    return [probes.cuda(), probes.driver(), probes.gpus(), probes.engine_images(inv),
            node_files.fact([script_path(inv)], sudo=True)]


def keyed(spec: LaunchSpec, found: KeyFacts, inv: Inventory) -> tuple[LaunchSpec, cc.CacheInputs]:
    """The spec with its compile-cache dir, and the key's inputs (JSON: sealed with the dir)."""
    image = found.images.get(spec.image)
    gpu = found.gpus[0].name if found.gpus else None
    inputs = cc.cache_inputs(spec.engine, image.id if image else None, gpu, found.driver,
                             found.cuda, engines.node_launch_argvs(spec)[0])
    key = cc.cache_key(inputs)
    return dataclasses.replace(spec, compile_cache_host_dir=cc.cache_dir(inv, key)), inputs


def prepare_actions(node: NodeContext, spec: LaunchSpec, found: KeyFacts) -> list[Action]:
    """Upload the node-side script if it changed, then check / clean / fill the key's dir."""
    inv, cache_dir = node.inv, spec.compile_cache_host_dir
    if cache_dir is None:   # launch asks only for a spec with the cache
        return []
    argv = ["python3", script_path(inv), "prepare", cache_dir]
    if peers_enabled(inv):
        others = [n.self_ip for _, n in inv.ranked() if n.name != node.name]
        argv += ["--peers", ",".join(others), "--port", str(inv.ports.peer),
                 "--secret-file", PeerFiles(inv.paths.work).secret]
    actions = [upload(f"upload {SCRIPT}", script_path(inv), script_text(SCRIPT), mode=0o644,
                      sudo=True),
               cmd("check the compile cache (a peer's when there is none)", *argv, sudo=True)]
    return node_files.changed_only(actions, found.node_files)


def sealed_fact(inv: Inventory) -> F.Fact[dict[str, str]]:
    """Every key dir under the cache root -> "sealed" or "open"."""
    root = shlex.quote(cc.cache_root(inv))
    script = (f'for d in {root}/*/; do [ -d "$d" ] || continue; k=$(basename "$d"); '
              'if [ -f "$d/.k3deploy-complete.json" ]; then echo "sealed $k"; '
              'else echo "open $k"; fi; done; true')

    def parse(out: str, _code: int) -> dict[str, str]:
        pairs = (line.split() for line in out.splitlines() if len(line.split()) == 2)
        return {key: state for state, key in pairs}
    return F.Fact("compile_caches", script, parse, sudo=True)

"""Peer fan-out, laptop side: which node fetches which large file from the Hub.

Each large file is assigned to one node (its owner), balanced by bytes, largest first, and
deterministically (same manifest and nodes give the same split). Every node fetches its own
share and every small file from the Hub, and the other large files from any peer that has them
verified (k3deploy/remote/peer_fetch.py); the split goes into each node's manifest.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence, Sized
from typing import Protocol

from k3deploy.cluster.hubmeta import Manifest, RepoFile
from k3deploy.core.jsonvalue import JSON

# Files the Hub stores in LFS are the checkpoint's bytes; the rest (configs, the index, the
# tokenizer's small files) is cheaper to fetch from the Hub on every node than to coordinate.
PEER_STALL_SECONDS = 30.0  # an owner showing no progress this long: fetch its file from the Hub


# What the fan-out reads of cluster/inventory.py's Inventory, as Protocols: inventory.py's rules
# import this module, so it cannot import the model back.
class DownloadView(Protocol):
    @property
    def peers(self) -> bool | None: ...
    @property
    def shared(self) -> bool: ...


class _PortsView(Protocol):
    @property
    def peer(self) -> int: ...


class _NodeView(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def self_ip(self) -> str: ...


class FanoutView(Protocol):
    @property
    def nodes(self) -> Sized: ...
    @property
    def download(self) -> DownloadView: ...
    @property
    def ports(self) -> _PortsView: ...
    def ranked(self) -> Sequence[tuple[int, _NodeView]]: ...


def peers_enabled(inv: FanoutView) -> bool:
    """`download.peers`, defaulting to on for a multi-node cluster; never for one node, nor
    for a shared cache (the nodes already share the bytes)."""
    if len(inv.nodes) < 2 or inv.download.shared:
        return False
    return True if inv.download.peers is None else inv.download.peers


def large_files(files: Iterable[RepoFile]) -> list[RepoFile]:
    return [f for f in files if f.sha256]


def assign(files: Iterable[RepoFile], nodes: list[str]) -> dict[str, str]:
    """path -> owning node: largest first, each to the node with the fewest bytes so far (ties:
    the earlier node in `nodes`, which is rank order)."""
    load = {name: 0 for name in nodes}
    owner: dict[str, str] = {}
    for f in sorted(large_files(files), key=lambda f: (-f.size, f.path)):
        name = min(nodes, key=lambda n: (load[n], nodes.index(n)))
        owner[f.path] = name
        load[name] += f.size
    return owner


def peer_block(inv: FanoutView, manifest: Manifest, node_name: str, secret_file: str,
               stall_seconds: float = PEER_STALL_SECONDS) -> dict[str, JSON]:
    """The `peers` part of one node's manifest (remote/peer_fetch.py reads it)."""
    names = [n.name for _, n in inv.ranked()]
    return {"self": node_name, "port": inv.ports.peer, "secret_file": secret_file,
            "nodes": {n.name: n.self_ip for _, n in inv.ranked() if n.name != node_name},
            "owner": {**assign(manifest.files, names)}, "stall_seconds": stall_seconds}


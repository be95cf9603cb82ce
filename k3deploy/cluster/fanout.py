"""Peer fan-out, laptop side: which node fetches which large file from the Hub.

Each large file is assigned to one node (its owner), balanced by bytes, largest first, and
deterministically (same manifest and nodes give the same split). Every node fetches its own
share and every small file from the Hub, and the other large files from any peer that has them
verified (k3deploy/remote/peer_fetch.py); the split goes into each node's manifest.
"""

from __future__ import annotations

# Files the Hub stores in LFS are the checkpoint's bytes; the rest (configs, the index, the
# tokenizer's small files) is cheaper to fetch from the Hub on every node than to coordinate.
PEER_STALL_SECONDS = 30.0  # an owner showing no progress this long: fetch its file from the Hub


def peers_enabled(inv) -> bool:
    """`download.peers`, defaulting to on for a multi-node cluster; never for one node, nor
    for a shared cache (the nodes already share the bytes)."""
    if len(inv.nodes) < 2 or inv.download.shared:
        return False
    return True if inv.download.peers is None else inv.download.peers


def large_files(files) -> list:
    return [f for f in files if f.sha256]


def assign(files, nodes: list[str]) -> dict[str, str]:
    """path -> owning node: largest first, each to the node with the fewest bytes so far (ties:
    the earlier node in `nodes`, which is rank order)."""
    load = {name: 0 for name in nodes}
    owner = {}
    for f in sorted(large_files(files), key=lambda f: (-f.size, f.path)):
        name = min(nodes, key=lambda n: (load[n], nodes.index(n)))
        owner[f.path] = name
        load[name] += f.size
    return owner


def peer_block(inv, manifest, node_name: str, secret_file: str,
               stall_seconds: float = PEER_STALL_SECONDS) -> dict:
    """The `peers` part of one node's manifest (remote/peer_fetch.py reads it)."""
    names = [n.name for _, n in inv.ranked()]
    return {"self": node_name, "port": inv.ports.peer, "secret_file": secret_file,
            "nodes": {n.name: n.self_ip for _, n in inv.ranked() if n.name != node_name},
            "owner": assign(manifest.files, names), "stall_seconds": stall_seconds}


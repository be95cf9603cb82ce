"""One run against one cluster: its connections (one per node), state files and lock."""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType

from k3deploy.cluster.inventory import Inventory, Node
from k3deploy.node.keyfiles import check_key_files
from k3deploy.core.state import ClusterLock, NodeState, state_dir_for
from k3deploy.node.ssh_types import Endpoint
from k3deploy.node.transport import NodeConnection


def endpoint_for(inv: Inventory, node: Node) -> Endpoint:
    known = inv.resolve_path(inv.ssh.known_hosts) or os.path.expanduser("~/.ssh/known_hosts")
    return Endpoint(
        name=node.name, host=node.address,
        user=node.user or inv.ssh.user, port=node.port or inv.ssh.port,
        key=inv.resolve_path(node.key or inv.ssh.key), known_hosts=known,
        connect_timeout=inv.ssh.connect_timeout, command_timeout=inv.ssh.command_timeout,
        use_ssh_config=inv.ssh.use_ssh_config)


class Session:
    def __init__(self, inv: Inventory, *, accept_new_host_keys: bool = False,
                 state_dir: str | None = None, lock: bool = True):
        check_key_files(inv)  # exit 2 naming the field, before any connection or lock
        self.inv = inv
        self.state_dir: Path = state_dir_for(inv.source, inv.cluster, state_dir)
        self.lock = ClusterLock(self.state_dir) if lock else None
        self.connections = {n.name: NodeConnection(endpoint_for(inv, n),
                                                   accept_new_host_keys=accept_new_host_keys)
                            for n in inv.nodes}
        self.states = {n.name: NodeState(self.state_dir, n.name) for n in inv.nodes}

    def __enter__(self) -> Session:
        if self.lock:
            self.lock.acquire()
        return self

    def __exit__(self, _kind: type[BaseException] | None, _err: BaseException | None,
                 _tb: TracebackType | None) -> None:
        for conn in self.connections.values():
            conn.close()
        if self.lock:
            self.lock.release()

    def conn(self, name: str) -> NodeConnection:
        return self.connections[name]


"""The peer server on each node (remote/peer_server.py) while fan-out is on.

Started by the download step before the downloader, and left running after the download: a
replaced spot node then refills from its peers instead of the Hub. `down` stops it (the
teardown playbook's stop-peer-server step, peer_server_stop.py). It is restarted when this run
would start it with another manifest or secret (their sha256 on the node are facts).
"""

from __future__ import annotations

import json
import shlex

from k3deploy.core.digest import sha256_text
from k3deploy.engines import compile_cache_key
from k3deploy.node import detached
from k3deploy.cluster.fanout import peer_block
from k3deploy.cluster.hubmeta import Manifest
from k3deploy.cluster.inventory import Inventory
from k3deploy.facts.download import PeerServer
from k3deploy.node.context import NodeContext
from k3deploy.remote import downloader_files, script_text
from k3deploy.remote.protocol import PeerFiles
from k3deploy.steps.base import Action, cmd, upload

SERVER = script_text("peer_server.py")


def downloader_uploads(work: str) -> list[Action]:
    """The downloader's files (remote.downloader_files): the download step uploads them, and so
    does the server's start, since the server imports its manifest and cache readers."""
    return [upload(f"upload {path.rpartition('/')[2]}", path, text, mode=0o644)
            for path, text in downloader_files(work)]


class PeerPaths(PeerFiles):
    def __init__(self, inv: Inventory):
        super().__init__(inv.paths.work)

    def status_args(self) -> list[str]:
        """weights_status.py's extra arguments: it reports the server's state as fact `peer`."""
        return [self.pid, self.manifest, self.secret]


def node_manifest(base_json: str, node: NodeContext, manifest: Manifest,
                  stall_seconds: float) -> str:
    """The manifest one node's downloader and peer server read: the pinned files plus the
    split of the large ones (k3deploy.cluster.fanout)."""
    doc = json.loads(base_json)
    doc["peers"] = peer_block(node.inv, manifest, node.name, PeerPaths(node.inv).secret,
                              stall_seconds)
    return json.dumps(doc)


def server_actions(peer: PeerServer | None, node: NodeContext, manifest_json: str, secret: str,
                   progress: str) -> list[Action]:
    """What makes the node's peer server run with this manifest and secret; [] when it does.
    `progress` is the downloader's progress file: peers see from it whether this node's
    download still runs."""
    paths = PeerPaths(node.inv)
    if peer is not None and peer.running and peer.manifest_sha256 == sha256_text(manifest_json) \
            and peer.secret_sha256 == sha256_text(secret):
        return []
    return [Action("create k3deploy work dir", ("mkdir", "-p", node.inv.paths.work), retry=True),
            upload("upload the peer server", paths.server, SERVER, mode=0o644),
            *downloader_uploads(node.inv.paths.work),
            upload("upload the cluster peer secret (0600)", paths.secret, secret),
            upload("upload the peer server's manifest", paths.manifest, manifest_json, mode=0o644),
            cmd("(re)start the peer server, detached", "sh", "-c", _start_script(node, paths, progress))]


def stop_script(paths: PeerPaths) -> str:
    pid = shlex.quote(paths.pid)
    # Only while the pid file's process still is the peer server (pids are reused); it ends
    # on SIGTERM (remote/peer_server.py), and one that does not is found by the start (exit 3).
    stop = detached.stop("$p", tenths=50, kill_after=False)
    return (f'p=$(cat {pid} 2>/dev/null); if [ -n "$p" ] && grep -q peer_server '
            f'/proc/$p/cmdline 2>/dev/null; then {stop}; fi; rm -f {pid}')


def _start_script(node: NodeContext, paths: PeerPaths, progress: str) -> str:
    argv = ["python3", paths.server, "--manifest", paths.manifest, "--hf-home", node.inv.paths.hf,
            "--listen", f"{node.node.self_ip}:{node.inv.ports.peer}", "--secret-file",
            paths.secret, "--served-log", paths.served, "--test-corrupt-flag",
            paths.corrupt_flag, "--ready-file", paths.ready, "--progress", progress,
            "--compile-cache", compile_cache_key.cache_root(node.inv)]
    # The pid file names the new server at once; the start waits (bounded) until it listens.
    return f"{stop_script(paths)}; " + detached.start(
        argv, paths.log, paths.ready, tenths=150, pid_file=paths.pid, ready_test="-e", fail_tail=5)

#!/usr/bin/env python3
"""Mock Hugging Face Hub for the testbed (standard library only).

Speaks exactly what huggingface_hub 2.x needs for snapshot_download, hf_hub_download,
get_hf_file_metadata, model_info(files_metadata=True), list_repo_tree and verify_repo_checksums:
  GET  /api/models/{repo}[/revision/{rev}][?blobs=true]     model info (siblings, sha)
  GET  /api/models/{repo}/tree/{rev}[?recursive=true]       file listing with lfs metadata
  HEAD/GET /{repo}/resolve/{rev}/{path}                     file, with Range: bytes=N-[M] -> 206
  GET  /api/agent-harnesses                                 404 (the client copes)
No Xet metadata is ever sent, so the client uses plain HTTP.

HUBDIR files: faults.json (re-read on every request), nodes.json (client IP -> node name),
stats.json (written atomically), ready (the URL, once listening; removed on a clean exit).
stats.json: {"repo", "sha", "repo_bytes", "updated", "by_node": {node: {"bytes", "requests",
"authorized_requests", "files": {path: {"bytes", "gets"}}}}}; node = name from nodes.json, else the
client IP; "requests" counts every request, "authorized_requests" those carrying a bearer token
(valid or not); "bytes" are /resolve/ body bytes actually sent (API JSON is not counted), so a clean
full download makes a node's "bytes" equal "repo_bytes". It is rewritten at most every 0.25 s and
right before the last chunk of every file body goes out, so a client that has finished reading a
file never sees stats that miss it.

CLI: hub.py serve --dir HUBDIR --listen IP:PORT [--repo R] [--shards N] [--shard-bytes B]
                  [--rate BYTES_PER_SEC_PER_CONN] [--node-rate BYTES_PER_SEC_PER_NODE] [--token-file F]
--node-rate caps each node (client address) over all its connections at once: a node's Internet
link, shared by its parallel downloads; --rate still caps each connection.

This file: the faults, the server's settings, start/stop and the CLI; hubhttp.py answers the
requests, hubfiles.py keeps stats.json, hubrepo.py builds the repo.
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

try:
    from tb import hubrepo
except ImportError:  # run as a script: scripts/tb/hub.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tb import hubrepo
from tb.hubfiles import HubStats, read_json, write_json_atomic  # noqa: E402
from tb.hubhttp import HubHandler  # noqa: E402


def write_fault(hub_dir, action: str, arg=None) -> dict:
    """Set a Hub fault: drop-after BYTES, corrupt FILE, heal (clears all). Faults combine.

    drop-after cuts every /resolve/ body after BYTES (of that response) and hangs up. Note that
    huggingface_hub 2.4 writes in 10 MiB pieces and drops the unwritten rest of a cut body, so with
    BYTES below 10 MiB the real client never gets further than its first retry's start.
    corrupt serves the second half of FILE with every bit flipped: same length, same headers."""
    path = Path(hub_dir) / "faults.json"
    faults = read_json(path, {})
    if action == "drop-after":
        faults["drop_after"] = int(arg)
    elif action == "corrupt":
        faults["corrupt"] = str(arg)
    elif action == "heal":
        faults = {}
    else:
        raise ValueError(f"unknown hub fault {action!r} (drop-after, corrupt, heal)")
    write_json_atomic(path, faults)
    return faults


class NodeLink:
    """One node's share of a --node-rate: every connection of that node draws from it."""

    def __init__(self, rate: int):
        self.rate, self.lock, self.busy_until = rate, threading.Lock(), 0.0

    def take(self, n: int) -> None:
        with self.lock:
            now = time.monotonic()
            self.busy_until = max(self.busy_until, now) + n / self.rate
            wait = self.busy_until - now
        time.sleep(wait)


class Hub:
    """The repo, the settings and the counters one server answers from."""

    def __init__(self, hub_dir, repo: hubrepo.Repo, rate: int = 0, token: str | None = None,
                 node_rate: int = 0):
        self.dir, self.repo, self.rate, self.token = Path(hub_dir), repo, int(rate), token
        self.node_rate, self.links, self.links_lock = int(node_rate), {}, threading.Lock()
        self.url: str | None = None  # set once the server is bound
        self.stats = HubStats(self.dir, repo)

    def link(self, ip: str) -> NodeLink | None:
        """The node's --node-rate link (by node name, so all its addresses share it)."""
        if not self.node_rate:
            return None
        name = self.stats.node_name(ip)
        with self.links_lock:
            return self.links.setdefault(name, NodeLink(self.node_rate))


class HubServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024
    answering = 0  # connections whose handler still runs (HubHandle.answering)
    _answering_lock = threading.Lock()

    def process_request(self, request, client_address):
        with self._answering_lock:
            self.answering += 1
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._answering_lock:
                self.answering -= 1


def start(hub_dir, listen: str = "127.0.0.1:0", repo_id: str = hubrepo.DEFAULT_REPO,
          shards: int = hubrepo.DEFAULT_SHARDS, shard_bytes: int = hubrepo.DEFAULT_SHARD_BYTES,
          rate: int = 0, token: str | None = None, node_rate: int = 0) -> tuple[HubServer, Hub]:
    """Bind the server (not yet serving) and write HUBDIR/ready with its URL."""
    hub_dir = Path(hub_dir)
    hub_dir.mkdir(parents=True, exist_ok=True)
    repo = hubrepo.build_repo(hub_dir / "repo-cache", repo_id, shards, shard_bytes)
    hub = Hub(hub_dir, repo, rate, token, node_rate)
    host, _, port = listen.rpartition(":")
    handler = type("BoundHubHandler", (HubHandler,), {"hub": hub})
    server = HubServer((host or "0.0.0.0", int(port)), handler)
    hub.url = f"http://{host or '127.0.0.1'}:{server.server_address[1]}"
    hub.stats.flush()
    (hub_dir / "ready").write_text(hub.url + "\n")
    return server, hub


class HubHandle:
    """A Hub serving from a background thread, for in-process tests."""

    def __init__(self, server: HubServer, hub: Hub):
        self.server, self.hub, self.url, self.repo, self.dir = server, hub, hub.url, hub.repo, hub.dir
        self.thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self.thread.start()

    def answering(self) -> int:
        """Connections the hub still serves. A killed client's end when the hub's next write to
        it fails; only then are the bytes it sent that client all counted."""
        return self.server.answering

    def stats(self) -> dict:
        """stats.json as of now (flushed first)."""
        return json.loads(self.hub.stats.flush())

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.hub.stats.stop_event.set()
        self.hub.stats.flush()
        (self.dir / "ready").unlink(missing_ok=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def serve_in_thread(hub_dir, **kwargs) -> HubHandle:
    """Same arguments as start(); returns a running HubHandle (use as a context manager)."""
    return HubHandle(*start(hub_dir, **kwargs))


def _serve(args) -> int:
    token = Path(args.token_file).read_text().strip() if args.token_file else None
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())  # before binding: no window for a hard kill
    server, hub = start(args.dir, args.listen, args.repo, args.shards, args.shard_bytes, args.rate, token,
                        args.node_rate)
    threading.Thread(target=lambda: (stop.wait(), server.shutdown()), daemon=True).start()
    print(f"mock hub serving {hub.repo.repo_id}@{hub.repo.sha} ({len(hub.repo.files)} files, "
          f"{hub.repo.total_bytes} bytes) on {hub.url}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    server.server_close()
    hub.stats.stop_event.set()
    hub.stats.flush()
    (Path(args.dir) / "ready").unlink(missing_ok=True)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="hub.py", description="k3deploy testbed mock Hugging Face Hub")
    sub = parser.add_subparsers(dest="cmd", required=True)
    serve = sub.add_parser("serve")
    serve.add_argument("--dir", required=True, help="HUBDIR: faults.json, nodes.json, stats.json, ready")
    serve.add_argument("--listen", required=True, help="IP:PORT (port 0: any free port)")
    serve.add_argument("--repo", default=hubrepo.DEFAULT_REPO)
    serve.add_argument("--shards", type=int, default=hubrepo.DEFAULT_SHARDS)
    serve.add_argument("--shard-bytes", type=int, default=hubrepo.DEFAULT_SHARD_BYTES)
    serve.add_argument("--rate", type=int, default=0, help="bytes/s per connection, 0 = unthrottled")
    serve.add_argument("--node-rate", type=int, default=0,
                       help="bytes/s per node over all its connections, 0 = unthrottled")
    serve.add_argument("--token-file", help="require 'Authorization: Bearer <token in this file>'")
    args = parser.parse_args(argv)
    return _serve(args)


if __name__ == "__main__":
    sys.exit(main())

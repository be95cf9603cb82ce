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
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

try:
    from tb import hubrepo
except ImportError:  # run as a script: scripts/tb/hub.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tb import hubrepo

_FLIP = bytes(b ^ 0xFF for b in range(256))
_RANGE = re.compile(r"^\s*bytes\s*=\s*(\d+)\s*-\s*(\d*)\s*$")
_STATS_INTERVAL = 0.25


def _write_json_atomic(path: Path, doc) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True))
    os.replace(tmp, path)


def _read_json(path: Path, default):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return default


def write_fault(hub_dir, action: str, arg=None) -> dict:
    """Set a Hub fault: drop-after BYTES, corrupt FILE, heal (clears all). Faults combine.

    drop-after cuts every /resolve/ body after BYTES (of that response) and hangs up. Note that
    huggingface_hub 2.4 writes in 10 MiB pieces and drops the unwritten rest of a cut body, so with
    BYTES below 10 MiB the real client never gets further than its first retry's start.
    corrupt serves the second half of FILE with every bit flipped: same length, same headers."""
    path = Path(hub_dir) / "faults.json"
    faults = _read_json(path, {})
    if action == "drop-after":
        faults["drop_after"] = int(arg)
    elif action == "corrupt":
        faults["corrupt"] = str(arg)
    elif action == "heal":
        faults = {}
    else:
        raise ValueError(f"unknown hub fault {action!r} (drop-after, corrupt, heal)")
    _write_json_atomic(path, faults)
    return faults


class HubStats:
    """Per-node counters, flushed to stats.json at most every 0.25 s and when a file body ends."""

    def __init__(self, hub_dir: Path, repo: hubrepo.Repo):
        self.path, self.nodes_path, self.repo = hub_dir / "stats.json", hub_dir / "nodes.json", repo
        self.lock, self.write_lock = threading.Lock(), threading.Lock()
        self.by_node: dict[str, dict] = {}
        self.nodes, self.nodes_stamp = {}, None
        self.dirty = True
        self.stop_event = threading.Event()
        threading.Thread(target=self._flush_loop, name="hub-stats", daemon=True).start()

    def node_name(self, ip: str) -> str:
        try:
            st = self.nodes_path.stat()
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError:
            stamp = None
        if stamp != self.nodes_stamp:
            self.nodes, self.nodes_stamp = _read_json(self.nodes_path, {}), stamp
        return self.nodes.get(ip, ip)

    def _node(self, ip: str) -> dict:
        name = self.node_name(ip)
        return self.by_node.setdefault(name, {"bytes": 0, "requests": 0, "authorized_requests": 0, "files": {}})

    def request(self, ip: str, has_bearer: bool) -> None:
        with self.lock:
            node = self._node(ip)
            node["requests"] += 1
            node["authorized_requests"] += int(has_bearer)
            self.dirty = True

    def file_bytes(self, ip: str, path: str, sent: int, new_get: bool = False) -> None:
        with self.lock:
            node = self._node(ip)
            entry = node["files"].setdefault(path, {"bytes": 0, "gets": 0})
            entry["bytes"] += sent
            entry["gets"] += int(new_get)
            node["bytes"] += sent
            self.dirty = True

    def flush(self) -> str:
        """Write stats.json now; returns its text. Compact JSON: with 32 nodes x 103 files it is
        rewritten thousands of times per run."""
        with self.write_lock:
            with self.lock:
                self.dirty = False
                text = json.dumps({"repo": self.repo.repo_id, "sha": self.repo.sha,
                                   "repo_bytes": self.repo.total_bytes, "by_node": self.by_node,
                                   "updated": time.time()})
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(text)
            os.replace(tmp, self.path)
            return text

    def _flush_loop(self) -> None:
        while not self.stop_event.wait(_STATS_INTERVAL):
            if self.dirty:
                self.flush()


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


class HubHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 300  # idle keep-alive connections must not pin a thread forever
    server_version = "k3tb-mock-hub/1"
    hub: Hub  # set on the subclass made per server

    def log_message(self, fmt, *args):  # request lines would flood the testbed log
        pass

    def do_GET(self):
        self._route(send_body=True)

    def do_HEAD(self):
        self._route(send_body=False)

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self._route(send_body=True)

    def _route(self, send_body: bool) -> None:
        auth = self.headers.get("Authorization") or ""
        self.hub.stats.request(self.client_address[0], auth.startswith("Bearer "))
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.split("/") if p]
        if parts[:2] == ["api", "agent-harnesses"]:
            return self._error(404, None, "Not Found")
        if parts[:2] == ["api", "models"]:
            return self._api(parts[2:], parse_qs(url.query), auth)
        if len(parts) >= 5 and parts[2] == "resolve":
            return self._resolve(parts, auth, send_body and self.command == "GET")
        if parts[:1] == ["api"] or (len(parts) >= 3 and parts[2] == "resolve"):
            return self._error(404, "RepoNotFound", "Repository not found")
        return self._error(404, None, "Not Found")

    def _check_repo(self, repo_id: str, rev: str | None, auth: str) -> bool:
        hub = self.hub
        if repo_id != hub.repo.repo_id:
            self._error(404, "RepoNotFound", "Repository not found")
        elif hub.token is not None and auth != f"Bearer {hub.token}":
            if auth.startswith("Bearer "):
                self._error(401, None, "Invalid credentials in Authorization header")
            else:
                self._error(401, "GatedRepo", f"Access to model {repo_id} is restricted. You must have access "
                                              "to it and be authenticated to access it. Please log in.")
        elif rev is not None and rev not in ("main", hub.repo.sha):
            self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        else:
            return True
        return False

    def _api(self, parts: list[str], query: dict, auth: str) -> None:
        repo_id, rest = "/".join(parts[:2]), parts[2:]
        rev = rest[1] if len(rest) >= 2 and rest[0] in ("revision", "tree") else None
        if not self._check_repo(repo_id, rev, auth):
            return
        if not rest or (rest[0] == "revision" and len(rest) == 2):
            blobs = query.get("blobs", ["false"])[0].lower() in ("1", "true")
            return self._json(hubrepo.model_info(self.hub.repo, blobs, gated=self.hub.token is not None))
        if rest[0] == "tree" and len(rest) >= 2:
            under = "/".join(rest[2:])
            entries = [e for e in hubrepo.tree_entries(self.hub.repo) if not under or e["path"].startswith(under + "/")]
            if under and not entries:
                return self._error(404, "EntryNotFound", f"{under} does not exist on \"{rev}\"")
            return self._json(entries)
        self._error(404, None, "Not Found")

    def _resolve(self, parts: list[str], auth: str, send_body: bool) -> None:
        repo_id, rev, path = "/".join(parts[:2]), parts[3], "/".join(parts[4:])
        if not self._check_repo(repo_id, rev, auth):
            return
        hub = self.hub
        f = hub.repo.file(path)
        if f is None:
            return self._error(404, "EntryNotFound", f"{path} does not exist on \"{rev}\"",
                               {"X-Repo-Commit": hub.repo.sha})
        start, end = 0, f.size - 1
        match = _RANGE.match(self.headers.get("Range") or "")
        if match:
            start = int(match.group(1))
            end = min(int(match.group(2)), f.size - 1) if match.group(2) else f.size - 1
            if start >= f.size or start > end:
                return self._error(416, None, "Range Not Satisfiable", {"Content-Range": f"bytes */{f.size}"})
        self.send_response(206 if match else 200)
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(end - start + 1),
                   "Accept-Ranges": "bytes", "X-Repo-Commit": hub.repo.sha, "ETag": f'"{f.etag}"'}
        if f.is_lfs:
            headers.update({"X-Linked-Etag": f'"{f.sha256}"', "X-Linked-Size": str(f.size)})
        if match:
            headers["Content-Range"] = f"bytes {start}-{end}/{f.size}"
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if send_body:
            self._send_file(f, start, end + 1)

    def _send_file(self, f: hubrepo.RepoFile, start: int, stop: int) -> None:
        faults, hub, ip = _read_json(self.hub.dir / "faults.json", {}), self.hub, self.client_address[0]
        drop_after = faults.get("drop_after")
        cut = stop if drop_after is None else min(stop, start + max(int(drop_after), 0))
        corrupt_from = f.size // 2 if faults.get("corrupt") == f.path else None
        hub.stats.file_bytes(ip, f.path, 0, new_get=True)
        rates = [r for r in (hub.rate, hub.node_rate) if r]
        chunk = max(1024, min(65536, min(rates) // 20)) if rates else 256 * 1024
        link = hub.link(ip)
        began, sent, pos = time.monotonic(), 0, start
        with open(hub.repo.local_path(f.path), "rb") as src:
            src.seek(start)
            while pos < cut:
                data = src.read(min(chunk, cut - pos))
                if corrupt_from is not None and pos + len(data) > corrupt_from:
                    keep = max(corrupt_from - pos, 0)
                    data = data[:keep] + data[keep:].translate(_FLIP)
                last = pos + len(data) >= cut
                if last:  # count and publish before the client can see the end of the body
                    hub.stats.file_bytes(ip, f.path, len(data))
                    hub.stats.flush()
                try:
                    self.wfile.write(data)
                except OSError:
                    if last:
                        hub.stats.file_bytes(ip, f.path, -len(data))
                    self.close_connection = True
                    return
                if not last:
                    hub.stats.file_bytes(ip, f.path, len(data))
                pos, sent = pos + len(data), sent + len(data)
                if link:
                    link.take(len(data))
                if hub.rate:
                    time.sleep(max(0.0, began + sent / hub.rate - time.monotonic()))
        if cut < stop:  # the drop-after fault: hang up mid-body
            self.close_connection = True

    def _json(self, doc) -> None:
        body = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: int, code: str | None, message: str, extra: dict | None = None) -> None:
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        if code:
            self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


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

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
requests.jsonl (every answer of the Hub and the CDN, timestamped: hublog.py), stats.json
(written atomically), ready (the URL, once listening; removed on a clean exit).
stats.json: {"repo", "sha", "repo_bytes", "updated", "by_node": {node: {"bytes", "requests",
"authorized_requests", "files": {path: {"bytes", "gets"}}}}}; node = name from nodes.json, else the
client IP; "requests" counts every request, "authorized_requests" those carrying a bearer token
(valid or not); "bytes" are /resolve/ body bytes actually sent (API JSON is not counted), so a clean
full download makes a node's "bytes" equal "repo_bytes". It is rewritten at most every 0.25 s and
right before the last chunk of every file body goes out, so a client that has finished reading a
file never sees stats that miss it.

CLI: hub.py serve --dir HUBDIR --listen IP:PORT [--repo R] [--shards N] [--shard-bytes B]
                  [--rate BYTES_PER_SEC_PER_CONN] [--node-rate BYTES_PER_SEC_PER_NODE] [--token-file F]
                  [--gated] [--cdn-listen IP:PORT [--url-ttl S] [--conn-rates SLOW,FAST,FRACTION]
                  [--conn-seed N] [--cdn-cert PEM --cdn-key PEM] [--first-byte-ms MS]]
--node-rate caps each node (client address) over all its connections at once, Hub and CDN
together: a node's Internet link, shared by its parallel downloads; --rate caps each connection
(on the CDN too, unless --conn-rates draws each CDN connection's speed).
--token-file: the granted tokens, one per line; `TOKEN fine-grained-no-gated` is a fine-grained
token of a granted account without "read access to public gated repos" (hubhttp.py).
--gated: the real gate (only /resolve refuses); without it a token file makes every request
need a granted token.
--cdn-listen: /resolve of LFS files redirects to a CDN on that address (hubcdn.py); its URL is in
HUBDIR/cdn once listening. stats.json then has "cdn": {bytes, requests, authorized_requests,
connections, slow_connections, by_node}. --cdn-cert/--cdn-key: the CDN speaks TLS (hubtls.py);
--first-byte-ms: it waits that long before each answer, as an edge's round trip and lookup.

This file: the server's settings, start/stop and the CLI; hubhttp.py answers the Hub's requests,
hubcdn.py the CDN's, hubbody.py sends file bodies, hubfaults.py keeps the faults, hubfiles.py
stats.json, hubrepo.py builds the repo.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
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
from tb import hubcdn, hubtls  # noqa: E402
from tb.hubfaults import LiveFaults  # noqa: E402
from tb.hubfaults import write_fault as _write_fault  # noqa: E402
from tb.hubfiles import HubStats  # noqa: E402
from tb.hublog import RequestLog  # noqa: E402
from tb.hubhttp import HubHandler  # noqa: E402


def write_fault(hub_dir, action: str, *args) -> dict:
    """Set a Hub fault (hubfaults.py): drop-after BYTES, corrupt FILE, outage SECONDS [STATUS],
    rate-limit QUOTA WINDOW, cdn-forbid N, heal (clears all). Faults combine.

    drop-after cuts every body (Hub or CDN) after BYTES of that response and hangs up. Note that
    huggingface_hub 2.4 writes in 10 MiB pieces and drops the unwritten rest of a cut body, so with
    BYTES below 10 MiB the real client never gets further than its first retry's start.
    corrupt serves the second half of FILE with every bit flipped: same length, same headers."""
    return _write_fault(hub_dir, action, *args)


class NodeLink:
    """One node's share of a --node-rate: every connection of that node draws from it."""

    def __init__(self, rate: int):
        self.rate, self.lock, self.busy_until, self.active = rate, threading.Lock(), 0.0, 0

    def share(self) -> int:
        """Bytes/s of the link for each of the bodies it carries now."""
        return self.rate // max(self.active, 1)

    @contextlib.contextmanager
    def sending(self):
        with self.lock:
            self.active += 1
        try:
            yield
        finally:
            with self.lock:
                self.active -= 1

    def take(self, n: int) -> None:
        with self.lock:
            now = time.monotonic()
            self.busy_until = max(self.busy_until, now) + n / self.rate
            wait = self.busy_until - now
        time.sleep(wait)


@dataclasses.dataclass
class HubOptions:
    """How the mock Hub behaves (see the module docstring)."""
    rate: int = 0
    node_rate: int = 0
    tokens: frozenset[str] | None = None
    no_gated_tokens: frozenset[str] = frozenset()  # fine-grained, without gated-repo read access
    gated: bool = False
    cdn_listen: str | None = None
    url_ttl: int = 3600
    conn_rates: tuple[int, int, float] | None = None
    conn_seed: int = 1
    cdn_cert: str | None = None   # with cdn_key: the CDN answers over TLS (hubtls.py)
    cdn_key: str | None = None
    first_byte: float = 0.0       # s the CDN waits before it answers each request


class Hub:
    """The repo, the settings and the counters one server (and its CDN) answers from."""

    def __init__(self, hub_dir, repo: hubrepo.Repo, opts: HubOptions):
        self.dir, self.repo, self.rate, self.tokens = Path(hub_dir), repo, int(opts.rate), opts.tokens
        self.gated, self.node_rate, self.no_gated = opts.gated, int(opts.node_rate), opts.no_gated_tokens
        self.links, self.links_lock = {}, threading.Lock()
        self.url: str | None = None  # set once the server is bound
        self.cdn_url: str | None = None  # set once the CDN is bound (--cdn-listen)
        self.signer = hubcdn.Signer(opts.url_ttl)
        self.lottery = hubcdn.ConnLottery(opts.conn_rates, opts.rate, opts.conn_seed)
        self.first_byte = float(opts.first_byte)
        self.faults = LiveFaults(self.dir)
        self.stats = HubStats(self.dir, repo)
        self.requests = RequestLog(self.dir)

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


def _bind(listen: str, handler_base, hub: Hub, tls: tuple[str, str] | None = None) -> tuple[HubServer, str]:
    host, _, port = listen.rpartition(":")
    handler = type(f"Bound{handler_base.__name__}", (handler_base,), {"hub": hub})
    server = HubServer((host or "0.0.0.0", int(port)), handler)
    if tls:
        hubtls.wrap(server, *tls)
    scheme = "https" if tls else "http"
    return server, f"{scheme}://{host or '127.0.0.1'}:{server.server_address[1]}"


def start(hub_dir, listen: str = "127.0.0.1:0", repo_id: str = hubrepo.DEFAULT_REPO,
          shards: int = hubrepo.DEFAULT_SHARDS, shard_bytes: int = hubrepo.DEFAULT_SHARD_BYTES,
          rate: int = 0, token: str | None = None, node_rate: int = 0,
          **options) -> tuple[list[HubServer], Hub]:
    """Bind the Hub (and the CDN with cdn_listen=...; not yet serving) and write HUBDIR/ready
    with the Hub's URL (HUBDIR/cdn with the CDN's). `token`: one granted token (shorthand for
    tokens=); other keyword arguments are HubOptions fields."""
    hub_dir = Path(hub_dir)
    hub_dir.mkdir(parents=True, exist_ok=True)
    repo = hubrepo.build_repo(hub_dir / "repo-cache", repo_id, shards, shard_bytes)
    if token is not None:
        options["tokens"] = frozenset([token])
    hub = Hub(hub_dir, repo, HubOptions(rate=rate, node_rate=node_rate, **options))
    server, hub.url = _bind(listen, HubHandler, hub)
    servers = [server]
    (hub_dir / "cdn").unlink(missing_ok=True)
    if options.get("cdn_listen"):
        tls = (options["cdn_cert"], options["cdn_key"]) if options.get("cdn_cert") else None
        cdn, hub.cdn_url = _bind(options["cdn_listen"], hubcdn.CdnHandler, hub, tls)
        servers.append(cdn)
        (hub_dir / "cdn").write_text(hub.cdn_url + "\n")
    hub.stats.flush()
    (hub_dir / "ready").write_text(hub.url + "\n")
    return servers, hub


class HubHandle:
    """A Hub (and its CDN) serving from background threads, for in-process tests."""

    def __init__(self, servers: list[HubServer], hub: Hub):
        self.servers, self.server, self.hub = servers, servers[0], hub
        self.url, self.cdn_url, self.repo, self.dir = hub.url, hub.cdn_url, hub.repo, hub.dir
        for server in servers:
            threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()

    def answering(self) -> int:
        """Connections the hub still serves. A killed client's end when the hub's next write to
        it fails; only then are the bytes it sent that client all counted."""
        return sum(server.answering for server in self.servers)

    def stats(self) -> dict:
        """stats.json as of now (flushed first)."""
        return json.loads(self.hub.stats.flush())

    def stop(self) -> None:
        _close(self.servers, self.hub)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def _close(servers: list[HubServer], hub: Hub) -> None:
    for server in servers:
        server.shutdown()
        server.server_close()
    hub.stats.stop_event.set()
    hub.stats.flush()
    (hub.dir / "ready").unlink(missing_ok=True)


def serve_in_thread(hub_dir, **kwargs) -> HubHandle:
    """Same arguments as start(); returns a running HubHandle (use as a context manager)."""
    return HubHandle(*start(hub_dir, **kwargs))


FINE_GRAINED_NO_GATED = "fine-grained-no-gated"


def _tokens(path: str | None) -> tuple[frozenset[str] | None, frozenset[str]]:
    """(granted tokens, fine-grained ones among them without gated-repo read access): a line
    is `TOKEN`, or `TOKEN fine-grained-no-gated`."""
    if not path:
        return None, frozenset()
    rows = [line.split() for line in Path(path).read_text().splitlines() if line.strip()]
    return (frozenset(row[0] for row in rows),
            frozenset(row[0] for row in rows if FINE_GRAINED_NO_GATED in row[1:]))


def _serve(args) -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())  # before binding: no window for a hard kill
    conn_rates = hubcdn.parse_conn_rates(args.conn_rates) if args.conn_rates else None
    tokens, no_gated = _tokens(args.token_file)
    servers, hub = start(args.dir, args.listen, args.repo, args.shards, args.shard_bytes, args.rate,
                         node_rate=args.node_rate, tokens=tokens, no_gated_tokens=no_gated, gated=args.gated,
                         cdn_listen=args.cdn_listen, url_ttl=args.url_ttl, conn_rates=conn_rates,
                         conn_seed=args.conn_seed, cdn_cert=args.cdn_cert, cdn_key=args.cdn_key,
                         first_byte=args.first_byte_ms / 1000)
    for server in servers[1:]:
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
    threading.Thread(target=lambda: (stop.wait(), servers[0].shutdown()), daemon=True).start()
    print(f"mock hub serving {hub.repo.repo_id}@{hub.repo.sha} ({len(hub.repo.files)} files, "
          f"{hub.repo.total_bytes} bytes) on {hub.url}" + (f", CDN {hub.cdn_url}" if hub.cdn_url else ""),
          flush=True)
    try:
        servers[0].serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    _close(servers[1:], hub)
    servers[0].server_close()
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
    serve.add_argument("--token-file", help="the granted tokens ('Authorization: Bearer T'), one per line "
                       f"('T {FINE_GRAINED_NO_GATED}': a fine-grained one without gated-repo read access)")
    serve.add_argument("--gated", action="store_true", help="the real gate: only /resolve refuses")
    serve.add_argument("--cdn-listen", help="IP:PORT of the CDN that /resolve of LFS files redirects to")
    serve.add_argument("--url-ttl", type=int, default=3600, help="seconds a signed CDN URL is valid")
    serve.add_argument("--conn-rates", help="SLOW,FAST,FRACTION: each CDN connection's bytes/s")
    serve.add_argument("--conn-seed", type=int, default=1, help="seed of the --conn-rates draws")
    serve.add_argument("--cdn-cert", help="PEM certificate: the CDN answers over TLS (with --cdn-key)")
    serve.add_argument("--cdn-key", help="PEM key of --cdn-cert")
    serve.add_argument("--first-byte-ms", type=float, default=0.0,
                       help="ms the CDN waits before it answers each request (an edge's first byte)")
    args = parser.parse_args(argv)
    return _serve(args)


if __name__ == "__main__":
    sys.exit(main())

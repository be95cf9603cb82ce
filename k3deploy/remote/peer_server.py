#!/usr/bin/env python3
"""Node-side peer server: serves this node's verified blobs of the pinned manifest to its peers.

Runs on a GPU node (standard library; imports the downloader's manifest and cache readers from
its own directory, where they are uploaded with it), started
detached by k3deploy's download step and stopped by `k3deploy down`:

    python3 peer_server.py --manifest M.json --hf-home DIR --listen IP:PORT --secret-file F
                           --served-log L [--max-connections N] [--test-corrupt-flag F]
                           [--ready-file F] [--progress DOWNLOADER_PROGRESS_JSON]

  HEAD|GET /blobs/<etag>   200 (or 206 for `Range: bytes=N-[M]`), the body sent with sendfile
  GET /index               {"verified": [etag], "partial": {etag: bytes on disk}, "downloader":
                           state}: one request tells a peer what it can fetch here and whether
                           the owner still progresses
  HEAD|GET /image?ref=R    the docker image R: its ID in `X-K3-Image-Id` and its content key in
                           `X-K3-Image-Content` (404 when absent); GET streams `docker save R`
                           (no length: the body ends at close), which a peer pipes into `docker
                           load` and checks by that key (image_peers.py: IDs differ across stores)
What it refuses: a request without `Authorization: Bearer <cluster peer secret>` (401); a path
that is not exactly /blobs/<hex etag> of a manifest file, whatever its encoding (404: nothing
from the request is ever used as a filesystem path, the blob is looked up by etag); a blob the
downloader's ledger does not vouch for, i.e. partial, unverified or changed since (404, with
`X-K3-Partial: <bytes on disk>` so a waiting peer sees its owner progressing); more than
--max-connections requests at once (503). It listens on the node's private address only.

Every GET appends one JSON line to --served-log: {"t", "client", "etag", "start", "bytes",
"complete", "seconds"}; tests add these up with the Hub's counters, the bench reads the rate. The secret is read from a 0600 file,
never from argv. Test hook: while the file --test-corrupt-flag exists, every byte served is
flipped (the testbed's `peer-corrupt` fault creates it), so the integrity path can be tested.
Exit codes: 0 stopped by SIGTERM/SIGINT; 2 bad input; 3 the address is taken (already running).
"""
from __future__ import annotations

import argparse
import hmac
import json
import os
import re
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING

sys.dont_write_bytecode = True  # no __pycache__ in the node's k3deploy dir
# The downloader's modules ship next to this file (protocol.DOWNLOADER_FILES).
import peer_cache
import peer_image
from fetch_base import BadInput
from fetch_cache import RepoCache
from fetch_manifest import Manifest
from peer_blobs import Blobs

if TYPE_CHECKING:
    from io import BufferedReader

    from protocol import PeerIndex

EXIT_OK, EXIT_BAD_INPUT, EXIT_BUSY = 0, 2, 3
_BLOB_PATH = re.compile(r"^/blobs/([0-9a-f]{40}|[0-9a-f]{64})$")
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")
# A docker reference (name[:tag][@digest]) and nothing else reaches docker's argv.
_FLIP = bytes(b ^ 0xFF for b in range(256))
SEND_CHUNK = 64 << 20  # sendfile per call: the bytes sent are known even when a peer hangs up
class PeerServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def __init__(self, address: tuple[str, int], blobs: Blobs, secret: str, served_log: Path,
                 slots: int, corrupt_flag: Path | None):
        super().__init__(address, PeerHandler)
        self.blobs, self.expected = blobs, f"Bearer {secret}".encode()
        self.served_log, self.log_lock = served_log, threading.Lock()
        self.slots, self.corrupt_flag = threading.BoundedSemaphore(slots), corrupt_flag
        self.compile_cache: str | None = None   # root of the sealed compile caches (build)

    def authorized(self, header: str) -> bool:
        return hmac.compare_digest(header.encode("utf-8", "replace"), self.expected)

    def corrupting(self) -> bool:
        return self.corrupt_flag is not None and self.corrupt_flag.exists()

    def record(self, client: str, etag: str, start: int, sent: int, complete: bool,
               seconds: float) -> None:
        line = json.dumps({"t": time.time(), "client": client, "etag": etag, "start": start,
                           "bytes": sent, "complete": complete, "seconds": round(seconds, 4)})
        with self.log_lock, open(self.served_log, "a") as fh:
            fh.write(line + "\n")


class PeerHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 60  # an idle or stalled peer does not pin a thread
    server_version = "k3deploy-peer/1"
    server: PeerServer

    def log_message(self, format: str, *args: str | int) -> None:
        pass

    def do_HEAD(self) -> None:
        self._guarded(send_body=False)

    def do_GET(self) -> None:
        self._guarded(send_body=True)

    def _guarded(self, send_body: bool) -> None:
        if not self.server.slots.acquire(blocking=False):
            return self._status(503, {"Retry-After": "1"})
        try:
            self._answer(send_body)
        finally:
            self.server.slots.release()

    def _answer(self, send_body: bool) -> None:
        if not self.server.authorized(self.headers.get("Authorization", "")):
            return self._status(401)
        if self.path == "/index" and send_body:
            return self._json(self.server.blobs.index())
        if self.path.startswith("/compile-cache/"):
            return self._send_file(peer_cache.resolve(self.server.compile_cache, self.path),
                                   send_body)
        if self.path.startswith("/image?"):
            return peer_image.answer(self, send_body)
        match = _BLOB_PATH.match(self.path)
        if match is None:
            return self._status(404)
        blob = self.server.blobs.open(match.group(1))
        if blob is None:
            have = self.server.blobs.partial_bytes(match.group(1))
            return self._status(404, {"X-K3-Partial": str(have)})
        with blob:
            self._send_blob(match.group(1), blob, send_body)

    def _send_file(self, path: str | None, send_body: bool) -> None:
        try:
            with open(path or "", "rb") as fh:
                body = fh.read()
        except OSError:
            return self._status(404)
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def _send_blob(self, etag: str, blob: BufferedReader, send_body: bool) -> None:
        size = os.fstat(blob.fileno()).st_size
        wanted = self.headers.get("Range")
        match = _RANGE.match(wanted.strip()) if wanted else None
        start = int(match.group(1)) if match else 0
        end = min(int(match.group(2)), size - 1) if match and match.group(2) else size - 1
        if wanted and (not match or start >= size or start > end):
            return self._status(416, {"Content-Range": f"bytes */{size}"})
        self.send_response(206 if match else 200)
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{etag}"')
        if match:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        if send_body:
            began = time.monotonic()
            sent = self._body(blob, start, end + 1 - start)
            self.server.record(self.client_address[0], etag, start, sent, sent == end + 1 - start,
                               time.monotonic() - began)

    def _body(self, blob: BufferedReader, start: int, count: int) -> int:
        sent = 0
        corrupt = self.server.corrupting()
        try:
            while sent < count:
                n = min(SEND_CHUNK, count - sent)
                if corrupt:
                    blob.seek(start + sent)
                    data = blob.read(min(n, 1 << 20)).translate(_FLIP)
                    self.connection.sendall(data)
                    n = len(data)
                else:  # no copy through Python: the kernel moves the bytes
                    n = self.connection.sendfile(blob, start + sent, n)
                if n == 0:
                    break
                sent += n
        except OSError:
            self.close_connection = True
        return sent

    def _json(self, doc: PeerIndex) -> None:
        body = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _status(self, status: int, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", "0")
        self.end_headers()


def read_secret(path: str) -> str:
    try:
        secret = Path(path).read_text().strip()
    except OSError as e:
        raise BadInput(f"cannot read the peer secret file {path}: {e.strerror}") from None
    if len(secret) < 16:
        raise BadInput(f"{path}: the peer secret is missing or too short")
    return secret


class Args(argparse.Namespace):
    """The command line, as parse_args reads it."""
    manifest: str
    hf_home: str
    listen: str
    secret_file: str
    served_log: str
    max_connections: int
    test_corrupt_flag: str | None
    progress: str | None
    compile_cache: str | None
    ready_file: str | None


def parse_args(argv: list[str] | None) -> Args:
    parser = argparse.ArgumentParser(description="Serve verified blobs to this cluster's peers.")
    parser.add_argument("--manifest", required=True)
    parser.add_argument("--hf-home", required=True)
    parser.add_argument("--listen", required=True, help="PRIVATE_IP:PORT")
    parser.add_argument("--secret-file", required=True, help="0600 file with the peer secret")
    parser.add_argument("--served-log", required=True, help="JSON lines, one per GET")
    parser.add_argument("--max-connections", type=int, default=64)
    parser.add_argument("--test-corrupt-flag", help="test hook: flip served bytes while it exists")
    parser.add_argument("--progress", help="the downloader's progress file (its state is indexed)")
    parser.add_argument("--compile-cache", help="root of the sealed compile caches it serves")
    parser.add_argument("--ready-file", help="written once listening (the starter waits for it)")
    return parser.parse_args(argv, namespace=Args())


def build(args: Args) -> PeerServer:
    manifest = Manifest.load(args.manifest)
    host, _, port = args.listen.rpartition(":")
    progress = Path(args.progress) if args.progress else None
    blobs = Blobs(manifest, RepoCache(args.hf_home, manifest.repo), progress)
    flag = Path(args.test_corrupt_flag) if args.test_corrupt_flag else None
    server = PeerServer((host, int(port)), blobs, read_secret(args.secret_file),
                        Path(args.served_log), max(1, args.max_connections), flag)
    server.compile_cache = args.compile_cache
    return server


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        server = build(args)
    except BadInput as e:
        print(f"peer_server: error: {e}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    except OSError as e:
        print(f"peer_server: error: cannot listen on {args.listen}: {e.strerror}", file=sys.stderr)
        return EXIT_BUSY
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    def shut_down_when_stopped() -> None:
        stop.wait()
        server.shutdown()
    threading.Thread(target=shut_down_when_stopped, daemon=True).start()
    if args.ready_file:
        Path(args.ready_file).write_text(f"{os.getpid()}\n")
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} peer_server: serving verified blobs on "
          f"{args.listen}", flush=True)
    server.serve_forever(poll_interval=0.2)
    server.server_close()
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())

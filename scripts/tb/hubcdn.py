"""The mock Hub's CDN (`--hub-cdn`): where /resolve of an LFS file redirects, on its own port.

What it imitates, and from where:
- The real Hub answers /resolve/{rev}/{file} of an LFS/Xet file with a 302 to
  `https://cas-bridge.xethub.hf.co/xet-bridge-us/<repo object id>/<hash>?X-Amz-...&X-Amz-Expires=3600...`,
  a "legacy client" bridge that serves the file bytes (hub-docs docs/hub/xet/legacy-git-lfs.md;
  /work/shared/reference/hf-hub-notes.md; a published transcript in padeoe/hf-mirror-site#51).
  A 2026-06 transcript (ngxson/wllama#248) shows the same path on `us.aws.cdn.hf.co` with
  CloudFront's `Expires=<epoch>&Policy=...&Signature=...&Key-Pair-Id=...` instead: clients must
  treat the URL as opaque; this mock keeps the X-Amz form of the reference notes. The repo part
  is a 24-hex object id, not the repo's name. The bridge answers 200, or 206 to a Range, with
  `Accept-Ranges: bytes`.
- The signed URL is checked when a request starts: after X-Amz-Date + X-Amz-Expires, or with a
  signature that does not match, it answers 403 with an S3-style `AccessDenied` XML body
  (aws/aws-sdk-js#3493 shows the expired form: "Request has expired").
- It is another origin, so huggingface_hub drops the Authorization header for it
  (huggingface_hub 2.4.0 file_download.py _get_metadata_or_catch_error: headers.pop
  ("authorization") when not _is_same_or_hub_host; the same at ee0a4510f4bc), and so does its
  HTTP client when it follows the redirect itself (httpx2 2.16.2 _client.py _redirect_headers:
  Authorization popped when the origin changes). The CDN counts requests that still carry one
  (`authorized_requests`, which must stay 0).
- Per-connection speed: huggingface/xet-core#821 (2026-04) found ~65-75% of CloudFront edges
  capping one connection at ~8.7 MB/s and the rest near 68 MB/s. `--conn-rates SLOW,FAST,FRACTION`
  draws SLOW with probability FRACTION for every new TCP connection, from a seeded generator
  (the same seed and arrival order give the same speeds).
- First byte (`--first-byte-ms`): every answer waits that long, an edge's round trip and cache
  lookup. The same issue's traceroute reaches the CloudFront POP in 16.8 ms, and its answers are
  cache hits (`X-Cache: Hit from cloudfront`) of 32 MiB ranges.
- TLS (`--cdn-cert`, hubtls.py): the bridge is an https:// origin.
"""
from __future__ import annotations

import calendar
import hashlib
import hmac
import os
import random
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, quote, unquote, urlsplit

from tb import hubbody, hubtls
from tb.hublog import LoggedHandler

if TYPE_CHECKING:
    from tb.hub import Hub

BRIDGE = "xet-bridge-us"
_AMZ_DATE = "%Y%m%dT%H%M%SZ"


def object_id(repo_id: str) -> str:
    """The repo's stand-in for the Hub's 24-hex repo object id in bridge paths."""
    return hashlib.sha1(repo_id.encode()).hexdigest()[:24]


class Signer:
    """Signed CDN URLs: HMAC over the path, date and lifetime (a secret per Hub process)."""

    def __init__(self, ttl: int):
        self.ttl, self.key = int(ttl), os.urandom(32)

    def _signature(self, path: str, date: str, expires: str) -> str:
        return hmac.new(self.key, f"{path}\n{date}\n{expires}".encode(), hashlib.sha256).hexdigest()

    def url(self, base: str, repo_id: str, sha256: str, filename: str) -> str:
        path = f"/{BRIDGE}/{object_id(repo_id)}/{sha256}"
        date = time.strftime(_AMZ_DATE, time.gmtime())
        sig = self._signature(path, date, str(self.ttl))
        disposition = quote(f'inline; filename*=UTF-8\'\'{filename}; filename="{filename}";', safe="")
        return (f"{base}{quote(path)}?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date={date}"
                f"&X-Amz-Expires={self.ttl}&X-Amz-SignedHeaders=host"
                f"&response-content-disposition={disposition}&X-Amz-Signature={sig}")

    def check(self, path: str, query: dict) -> str | None:
        """None when the URL is valid now, else the S3 error message."""
        date, expires = query.get("X-Amz-Date", [""])[0], query.get("X-Amz-Expires", [""])[0]
        given = query.get("X-Amz-Signature", [""])[0]
        if not hmac.compare_digest(given, self._signature(path, date, expires)):
            return "The request signature we calculated does not match the signature you provided."
        issued = calendar.timegm(time.strptime(date, _AMZ_DATE))  # ours: the signature matched
        if time.time() > issued + int(expires):
            return "Request has expired"
        return None


class ConnLottery:
    """Each new connection's speed: SLOW with probability FRACTION, else FAST (seeded)."""

    def __init__(self, spec: tuple[int, int, float] | None, fallback: int, seed: int):
        self.spec, self.fallback = spec, int(fallback)
        self.random, self.lock = random.Random(seed), threading.Lock()

    def draw(self) -> tuple[int, bool]:
        if self.spec is None:
            return self.fallback, False
        slow, fast, fraction = self.spec
        with self.lock:
            is_slow = self.random.random() < fraction
        return (slow if is_slow else fast), is_slow


def parse_conn_rates(text: str) -> tuple[int, int, float]:
    """SLOW,FAST,FRACTION -> (slow, fast, fraction); raises ValueError."""
    parts = text.split(",")
    if len(parts) != 3:
        raise ValueError("--conn-rates wants SLOW,FAST,FRACTION (bytes/s, bytes/s, 0..1)")
    slow, fast, fraction = int(parts[0]), int(parts[1]), float(parts[2])
    if slow <= 0 or fast <= 0 or not 0 <= fraction <= 1:
        raise ValueError("--conn-rates: rates must be > 0 and FRACTION within 0..1")
    return slow, fast, fraction


class CdnHandler(LoggedHandler, BaseHTTPRequestHandler):
    log_host = "cdn"
    protocol_version = "HTTP/1.1"
    timeout = 300
    server_version = "k3tb-mock-cdn/1"
    hub: Hub  # set on the subclass made per server

    def log_message(self, fmt, *args):
        pass

    def setup(self):
        hubtls.handshake_in_thread(self.request, self.timeout)
        super().setup()
        self.rate, slow = self.hub.lottery.draw()  # one draw per TCP connection
        self.hub.stats.cdn.connection(slow)

    def do_GET(self):
        self._serve(send_body=True)

    def do_HEAD(self):
        self._serve(send_body=False)

    def _serve(self, send_body: bool) -> None:
        hub, ip = self.hub, self.client_address[0]
        if hub.first_byte:
            time.sleep(hub.first_byte)
        hub.stats.cdn.request(ip, bool(self.headers.get("Authorization")))
        faults = hub.faults.current()
        status = hub.faults.outage(faults)
        if status is not None:
            return self._error(status, "ServiceUnavailable", "Service unavailable")
        if hub.faults.cdn_forbidden(faults):
            return self._error(403, "AccessDenied", "Access Denied")
        url = urlsplit(self.path)
        path = unquote(url.path)
        problem = hub.signer.check(path, parse_qs(url.query))
        if problem is not None:
            return self._error(403, "AccessDenied", problem)
        f = self._file(path)
        if f is None:
            return self._error(404, "NoSuchKey", "The specified key does not exist.")
        span = hubbody.byte_range(self.headers.get("Range"), f.size)
        if span is None:
            return self._error(416, "InvalidRange", "The requested range is not satisfiable",
                               {"Content-Range": f"bytes */{f.size}"})
        start, end, ranged = span
        self.send_response(206 if ranged else 200)
        for key, value in {**hubbody.range_headers(f, start, end, ranged), "ETag": f'"{f.sha256}"'}.items():
            self.send_header(key, value)
        self.end_headers()
        if send_body:
            hubbody.send_file(self, hub, hub.stats.cdn, f, start, end + 1, self.rate)

    def _file(self, path: str):
        parts = [p for p in path.split("/") if p]
        if len(parts) != 3 or parts[0] != BRIDGE or parts[1] != object_id(self.hub.repo.repo_id):
            return None
        return next((f for f in self.hub.repo.files if f.sha256 == parts[2]), None)

    def _error(self, status: int, code: str, message: str, extra: dict | None = None) -> None:
        body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
                f"<Message>{message}</Message></Error>").encode()
        self.send_response(status)
        for key, value in {"Content-Type": "application/xml", "Content-Length": str(len(body)),
                           **(extra or {})}.items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

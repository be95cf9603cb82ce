"""The Hub as a byte source: one ranged GET of a file, through `/resolve` and its CDN redirect.

`GET /{repo}/resolve/{sha}/{path}` of an LFS/Xet file answers 302 to a CDN URL signed for an
hour (hf-hub-notes; hub-docs docs/hub/xet/legacy-git-lfs.md); small files answer 200/206 from
the Hub itself. The redirect is not followed by the HTTP client but here, so that:
  - the signed URL is kept per file and reused by every connection until it is refused
    (`/resolve` counts against the Hub's "resolvers" rate limit; the CDN does not);
  - the CDN never gets the Authorization header (httpx drops it on a cross-origin redirect too;
    here the CDN request is built without it);
  - a CDN 400/403/404/410 (expired or refused signature) means a fresh `/resolve`, not a failed
    file;
  - each connection has its own HTTP client (one TCP connection to the CDN), so a connection
    that landed on a slow edge can be replaced by a new one (fetch_conns.py).
`/resolve` goes through huggingface_hub's own session (`get_session()`, `build_hf_headers()`):
endpoint, user agent, token and proxies as with the real client.
"""
from __future__ import annotations

import http.client
import ssl
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from types import ModuleType
from typing import Protocol
from urllib.parse import urljoin, urlsplit

import fetch_http
from fetch_base import DownloadError
from fetch_manifest import FileSpec, Manifest
from fetch_retry import Gate, Headers, Transient, told_wait

URL_MAX_AGE = 600.0           # seconds a signed CDN URL is reused (the Hub signs for 3600)
REFRESH = (400, 403, 404, 410)  # from the CDN: the signature is refused; ask /resolve again
RETRYABLE = (408, 425, 429, 500, 502, 503, 504)


class Response(Protocol):
    """A response as read here: fetch_http.Answer, or one of huggingface_hub's HTTP package
    (httpx or httpx2: its session's, a proxied Link's)."""
    @property
    def status_code(self) -> int: ...
    @property
    def headers(self) -> Headers: ...
    @property
    def is_redirect(self) -> bool: ...
    def read(self) -> bytes: ...
    def iter_bytes(self) -> Iterator[bytes]: ...


class HttpClient(Protocol):
    """fetch_http.Client, or huggingface_hub's HTTP package's Client: `stream` as called here."""
    def stream(self, method: str, url: str, *, headers: dict[str, str],
               follow_redirects: bool) -> AbstractContextManager[Response]: ...
    def close(self) -> None: ...


class Link:
    """One connection's HTTP client to the CDN; renew() drops it for a new TCP connection.
    Without a proxy in the environment it is fetch_http's (the body read into a buffer);
    with one, huggingface_hub's own HTTP package (httpx, or httpx2 from huggingface_hub 2.x),
    whose proxy rules apply then."""

    def __init__(self, http_module: ModuleType, timeout: float, tls: ssl.SSLContext):
        self.httpx, self.timeout, self.tls = http_module, timeout, tls
        self.client: HttpClient | None = None

    def get(self) -> HttpClient:
        if self.client is None:
            if urllib.request.getproxies():
                self.client = self.httpx.Client(timeout=self.timeout, follow_redirects=False, verify=self.tls,
                                                limits=self.httpx.Limits(max_connections=1))
            else:
                self.client = fetch_http.Client(self.timeout, self.tls)
        return self.client

    def renew(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None


class HubSource:
    def __init__(self, manifest: Manifest, token: str | None, stop_event: threading.Event, gate: Gate):
        from huggingface_hub import constants, hf_hub_url
        from huggingface_hub.utils import build_hf_headers, get_session
        self.manifest, self.stop_event, self.gate, self.url_for = manifest, stop_event, gate, hf_hub_url
        self.session, self.timeout = get_session(), constants.HF_HUB_DOWNLOAD_TIMEOUT
        self.headers = build_hf_headers(token=token, library_name="k3deploy-fetch-weights", library_version="1")
        self.headers["Accept-Encoding"] = "identity"  # byte offsets must be offsets in the file itself
        self.cdn_headers = {k: v for k, v in self.headers.items() if k.lower() != "authorization"}
        self.hub_host = urlsplit(manifest.endpoint).netloc
        self.signed: dict[str, tuple[str, float]] = {}  # path -> (CDN URL, when resolved)
        self.lock = threading.Lock()
        self.tls: ssl.SSLContext | None = None
        self.http = sys.modules[type(self.session).__module__.split(".")[0]]
        # OSError: a socket's own error, raw; a local write's never reaches here as one (the
        # partial blob raises fetch_base.DiskFault, which fails the file at once)
        self.transport_errors = (getattr(self.http, "TransportError", OSError), OSError,
                                 http.client.HTTPException)

    def link(self) -> Link:
        return Link(self.http, self.timeout, self._tls())

    def _tls(self) -> ssl.SSLContext:
        """One TLS context for every connection: a Client builds its own by default, loading
        the CA bundle each time (tens of ms of CPU per replaced connection, in the profile the
        largest cost after the bytes themselves). The same defaults, built once."""
        with self.lock:
            if self.tls is None:
                make = getattr(self.http, "create_ssl_context", None)
                self.tls = make() if make else ssl.create_default_context()
            return self.tls

    @contextmanager
    def open_range(self, spec: FileSpec, start: int, end: int, link: Link) -> Iterator[Response]:
        """A response whose body is bytes [start, end) of the file (or, if the server ignored
        the range, the whole file: the caller skips to `start`). Raises Transient for what
        another request may not have, DownloadError for what it will."""
        headers = {"Range": f"bytes={start}-{end - 1}"}
        url = self._signed(spec)
        try:
            if url:
                with self._get(link.get(), url, {**self.cdn_headers, **headers}) as response:
                    if not self._refused(spec, response):
                        yield self._checked(spec, response, start, end)
                        return
            with self._resolve(spec, headers) as resolved:
                if not isinstance(resolved, str):
                    yield self._checked(spec, resolved, start, end)
                    return
                cdn = resolved
            with self._get(link.get(), cdn, {**self.cdn_headers, **headers}) as response:
                if self._refused(spec, response):
                    raise Transient(f"the CDN answered HTTP {response.status_code} to a fresh signed URL")
                yield self._checked(spec, response, start, end)
        except self.transport_errors as e:
            raise Transient(f"{type(e).__name__}: {e}") from None

    @contextmanager
    def _get(self, client: HttpClient, url: str, headers: dict[str, str]) -> Iterator[Response]:
        """One request through the host's gate (fetch_retry.Gate); no answer at all (refused,
        timed out before the status line) goes to the gate too (`Gate.lost`), or a probe that
        met a dead host would leave the others waiting for its verdict."""
        ticket = self.gate.wait(urlsplit(url).netloc)
        if ticket is None:
            raise Transient("stopped")
        answered = False
        try:
            with client.stream("GET", url, headers=headers, follow_redirects=False) as response:
                answered = True
                if response.status_code in RETRYABLE:
                    response.read()
                    self.gate.failed(ticket, told_wait(response.status_code, response.headers))
                    raise Transient(f"HTTP {response.status_code} from {ticket.host}")
                self.gate.ok(ticket)
                yield response
        finally:
            if not answered:
                self.gate.lost(ticket)

    def _signed(self, spec: FileSpec) -> str | None:
        with self.lock:
            url, at = self.signed.get(spec.path, (None, 0.0))
        return url if url and time.monotonic() - at < URL_MAX_AGE else None

    def _refused(self, spec: FileSpec, response: Response) -> bool:
        if response.status_code not in REFRESH:
            return False
        response.read()
        with self.lock:
            self.signed.pop(spec.path, None)
        return True

    @contextmanager
    def _resolve(self, spec: FileSpec, headers: dict[str, str]) -> Iterator[Response | str]:
        """The response when the Hub serves the bytes itself, the CDN URL on a redirect."""
        url = self.url_for(self.manifest.repo, spec.path, revision=self.manifest.sha, endpoint=self.manifest.endpoint)
        for _ in range(5):  # relative redirects stay on the Hub (a renamed repo), with the token
            with self._get(self.session, url, {**self.headers, **headers}) as response:
                if response.is_redirect:
                    target = urljoin(url, response.headers.get("Location") or "")
                    response.read()
                    if urlsplit(target).netloc == self.hub_host:
                        url = target
                        continue
                    with self.lock:
                        self.signed[spec.path] = (target, time.monotonic())
                    yield target
                    return
                self._fatal_status(spec, response)
                yield response
                return
        raise DownloadError(f"{spec.path}: too many redirects on the Hub")

    def _checked(self, spec: FileSpec, response: Response, start: int, end: int) -> Response:
        status = response.status_code
        self._fatal_status(spec, response)
        content_range = response.headers.get("Content-Range") or ""
        total: str | None
        if status == 206:
            if not content_range.startswith(f"bytes {start}-"):
                raise Transient(f"unexpected Content-Range {content_range!r}")
            total = content_range.rpartition("/")[2]
        else:
            total = response.headers.get("Content-Length")
        encoding = response.headers.get("Content-Encoding")
        if encoding is not None and encoding != "identity":
            total = None  # a compressed length says nothing about the file's size
        if total and total.isdigit() and int(total) != spec.size:
            raise DownloadError(f"{spec.path}: the server has {total} bytes, the manifest says {spec.size}")
        return response

    def _fatal_status(self, spec: FileSpec, response: Response) -> None:
        status = response.status_code
        if status in (200, 206):
            return
        response.read()
        from huggingface_hub.utils import hf_raise_for_status
        try:
            # typed for its own client's responses; it reads what every Response has, and what a
            # fetch_http.Answer lacks (raise_for_status) raises here, as any other refusal does
            hf_raise_for_status(response)  # type: ignore[arg-type]
        except Exception as e:
            reason = response.headers.get("X-Error-Message") or (str(e).strip().splitlines() or [""])[0]
            raise DownloadError(f"{spec.path}: HTTP {status} {type(e).__name__}: {reason}") from None
        raise DownloadError(f"{spec.path}: unexpected HTTP {status}")

"""A connection to the CDN on the standard library's http.client: one kept-alive TCP (or TLS)
connection, the body read into the caller's preallocated buffer.

The bytes are the downloader's per-byte work, so they are read as the kernel and OpenSSL hand
them over, into one buffer per connection (fetch_conns.BUFFER), and written from it: no bytes
object per read, no HTTP client framework per chunk. huggingface_hub's own client (httpx)
hands over what one read of its transport brings, parsed by h11 and its decoders, and over TLS
that is one 16 KiB record per read: most of the downloader's CPU was spent on that, not on
TLS, hashing or writing (scripts/bench --throughput).

`fill()` takes what the socket brings, several reads up to the buffer's size or FILL_SECONDS:
on a slow edge it never blocks a connection's bookkeeping (its rate, a stop, the resume record)
for the seconds a full buffer would take. The reads themselves are made by the process's one
reader thread (fetch_reader), once http.client's buffered reader holds none of the body. The
body's length is kept here as HTTPResponse.readinto keeps it (`length` less the bytes read; at
0 the response is read to its end and its connection free for the next request).

Used only without a proxy in the environment (fetch_hub.Link): the proxy rules (HTTPS_PROXY,
NO_PROXY, ...) stay huggingface_hub's client's. Standard library only.
"""
from __future__ import annotations

import http.client
import io
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol
from urllib.parse import SplitResult, urlsplit

import fetch_reader

FILL_SECONDS = fetch_reader.FILL_SECONDS   # at most this long in one fill(), however little arrived
# A fill is at most 1/FILL_SHARE of its file (at least FILL_FLOOR): the bytes a SIGKILL finds
# read but not yet written are a small share of any file, never a whole small file that was
# then received whole twice.
FILL_SHARE, FILL_FLOOR = 16, 64 << 10
REDIRECTS = (301, 302, 303, 307, 308)


def fill_bytes(file_size: int, most: int) -> int:
    """How much of a buffer of `most` bytes one fill of a file of `file_size` bytes may use."""
    return min(most, max(FILL_FLOOR, file_size // FILL_SHARE))


class Answer:
    """The response as fetch_hub reads it: status_code, headers (case-insensitive .get),
    read(), iter_bytes(), and fill() into a buffer."""

    def __init__(self, response: http.client.HTTPResponse, sock: socket.socket | None = None):
        self.raw, self.status_code, self.headers = response, response.status, response.headers
        self.error: BaseException | None = None   # met after a fill's first bytes: raised at the next
        # The connection's socket, read by fetch_reader once http.client's reader is drained
        # (None, or a socket without a timeout: every read through http.client, as the peer
        # source's).
        self.sock, self.drained = sock, False
        self.timeout = sock.gettimeout() if sock is not None else None

    @property
    def is_redirect(self) -> bool:
        return self.status_code in REDIRECTS and "location" in self.headers

    def read(self) -> bytes:
        return self.raw.read()

    def iter_bytes(self) -> Iterator[bytes]:
        while chunk := self.raw.read1(1 << 20):
            yield chunk

    def fill(self, view: memoryview) -> int:
        """Bytes of the body read into `view` (0 at its end). A connection that fails after
        some bytes arrived hands those over first and raises at the next call: what arrived
        is written, not fetched again."""
        if self.error is not None:
            raise self.error
        raw = self.raw
        if raw.chunked or raw.length is None:   # only http.client's own reads decode chunks
            data = raw.read1(len(view))
            view[:len(data)] = data
            return len(data)
        want, got, began = min(len(view), raw.length), 0, time.monotonic()
        try:
            while got < want and self.error is None:
                n = self._read(view[got:want], began)
                if not n:   # closed before its Content-Length: as HTTPResponse.readinto says it
                    raise http.client.IncompleteRead(b"", raw.length - got)
                got += n
                if time.monotonic() - began > FILL_SECONDS:
                    break
        except (OSError, http.client.HTTPException) as e:
            if not got:
                raise
            self.error = e
        raw.length -= got
        if raw.length == 0:
            raw.read()   # the body's end: the response closes, its connection takes the next request
        return got

    def _read(self, view: memoryview, began: float) -> int:
        """One read: from http.client's buffered reader while it may hold body bytes (read
        with the headers), then through this process's reader thread (fetch_reader)."""
        if self.sock is None or self.timeout is None or not self.drained:   # (no timeout without a socket)
            n = self.raw.fp.readinto1(view)
            # A readinto1 asking more than the buffered reader's buffer (socket.makefile's
            # io.DEFAULT_BUFFER_SIZE) hands over what it held and reads the socket straight
            # into `view`: it holds nothing after it (CPython 3.11 Modules/_io/bufferedio.c,
            # _buffered_readinto_generic: the buffer is reset, then a read of more than
            # buffer_size goes to the caller's memory; main keeps the rule), so the socket may
            # be read directly from then on. test_fetch_http checks it on the running Python.
            self.drained = self.timeout is not None and len(view) > io.DEFAULT_BUFFER_SIZE
            return n
        left = max(0.0, FILL_SECONDS - (time.monotonic() - began))
        n, error = fetch_reader.reader().fill(self.sock, view, self.timeout, left)
        if error is not None:
            if not n:
                raise error
            self.error = error
        return n


class Client:
    """One connection; a request to another origin (a file signed on another CDN host) opens
    a new one. The same `stream()` as httpx.Client's, as fetch_hub calls it."""

    def __init__(self, timeout: float, tls: ssl.SSLContext | None):
        self.timeout, self.tls = timeout, tls
        self.conn: http.client.HTTPConnection | None = None
        self.origin: tuple[str, str | None, int | None] | None = None

    @contextmanager
    def stream(self, method: str, url: str, headers: dict[str, str],
               **_httpx_options: bool) -> Iterator[Answer]:
        """httpx.Client.stream's call (fetch_hub passes follow_redirects=False: this client
        never follows a redirect)."""
        parts = urlsplit(url)
        origin = (parts.scheme, parts.hostname, parts.port)
        if self.conn is None or origin != self.origin:
            self.close()
            self.conn, self.origin = self._connect(parts), origin
        conn = self.conn
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        response = None
        try:
            conn.request(method, target, headers=headers)
            response = conn.getresponse()
            yield Answer(response, conn.sock)
        finally:
            if response is None or not response.isclosed():
                self.close()   # a body not read to its end: the connection cannot take the next request

    def _connect(self, parts: SplitResult) -> http.client.HTTPConnection:
        if parts.hostname is None:   # http.client would fail on it too, less plainly
            raise ValueError(f"no host in the URL {parts.geturl()!r}")
        if parts.scheme == "https":
            return http.client.HTTPSConnection(parts.hostname, parts.port, timeout=self.timeout,
                                               context=self.tls)
        return http.client.HTTPConnection(parts.hostname, parts.port, timeout=self.timeout)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class Streamed(Protocol):
    """A response of huggingface_hub's HTTP package (httpx): its status and its body as it
    hands it over."""
    @property
    def status_code(self) -> int: ...
    def iter_bytes(self) -> Iterator[bytes]: ...


def body(response: Answer | Streamed, view: memoryview, size: int | None = None,
         place: Callable[[], int] | None = None) -> Iterator[bytes | memoryview]:
    """The response's body in chunks: read into `view` (each chunk a slice of it, valid until
    the next) where the client can (fetch_http.Answer.fill), else as it hands them over. With
    `place`, each fill of at most `size` bytes starts at view offset place() (a direct write
    wants the file's aligned offsets on aligned memory: direct_io.aligned)."""
    fill = getattr(response, "fill", None)
    if fill is None:
        yield from response.iter_bytes()
        return
    size = len(view) if size is None else size
    while True:
        at = place() if place is not None else 0
        n = fill(view[at:at + size])
        if not n:
            return
        yield view[at:at + n]

"""remote/fetch_http.py: the CDN connection on http.client, against a stdlib HTTP/1.1 server on
127.0.0.1 that keeps connections alive (as a CDN does) and counts them."""

from __future__ import annotations

import http.client
import http.server
import socket
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

import k3deploy.remote.fetch_weights  # noqa: F401 (puts the node-side directory on sys.path)
import fetch_http  # noqa: E402
import fetch_reader  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from tb import hubtls  # noqa: E402  (the testbed CDN's certificate maker)

BODY = bytes(range(256)) * 4096   # 1 MiB


class Ranged(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"   # kept alive; each body has a Content-Length

    def setup(self):
        super().setup()
        self.server.connections += 1

    def do_GET(self):
        self.server.seen.append(dict(self.headers))
        start, _, end = self.headers["Range"].removeprefix("bytes=").partition("-")
        start, end = int(start), int(end) + 1
        cut = self.server.cut_at
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(BODY)}")
        self.send_header("Content-Length", str(end - start))
        self.end_headers()
        if cut is None:
            self.wfile.write(BODY[start:end])
            return
        self.wfile.write(BODY[start:start + cut])   # then the connection is lost
        self.wfile.flush()
        self.connection.shutdown(socket.SHUT_RDWR)
        self.close_connection = True

    def log_message(self, *args):
        pass


@contextmanager
def serving(cut_at=None):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ranged)
    server.connections, server.seen, server.cut_at = 0, [], cut_at
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server, f"http://127.0.0.1:{server.server_address[1]}/blob"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def read_range(client, url, start, end, view):
    got = bytearray()
    with client.stream("GET", url, {"Range": f"bytes={start}-{end - 1}"}) as answer:
        assert answer.status_code == 206
        for chunk in fetch_http.body(answer, view):
            got += chunk
    return bytes(got)


def test_ranges_are_read_into_the_buffer_over_one_kept_alive_connection():
    view = memoryview(bytearray(64 << 10))
    with serving() as (server, url):
        client = fetch_http.Client(10.0, None)
        assert read_range(client, url, 0, 300_000, view) == BODY[:300_000]
        assert read_range(client, url, 300_000, len(BODY), view) == BODY[300_000:]
        client.close()
    assert server.connections == 1   # the first body was read to its end: the socket was reused


def test_a_range_left_unread_closes_its_connection_and_the_next_opens_a_new_one():
    view = memoryview(bytearray(4096))
    with serving() as (server, url):
        client = fetch_http.Client(10.0, None)
        with client.stream("GET", url, {"Range": "bytes=0-999999"}) as answer:
            assert answer.fill(view) == 4096   # a range cut short by a steal: the rest is not read
        assert read_range(client, url, 10, 5000, view) == BODY[10:5000]
        client.close()
    assert server.connections == 2


def test_bytes_that_arrived_before_the_connection_was_lost_are_handed_over_then_the_error():
    view = memoryview(bytearray(1 << 20))
    with serving(cut_at=200_000) as (server, url):
        client = fetch_http.Client(10.0, None)
        got = bytearray()
        with pytest.raises(http.client.IncompleteRead), \
                client.stream("GET", url, {"Range": "bytes=0-999999"}) as answer:
            while n := answer.fill(view):
                got += view[:n]
        client.close()
    assert bytes(got) == BODY[:200_000]


def test_the_request_carries_only_the_headers_it_is_given():
    """The CDN gets what fetch_hub passes (its headers without Authorization), no more."""
    view = memoryview(bytearray(4096))
    with serving() as (server, url):
        client = fetch_http.Client(10.0, None)
        read_range(client, url, 0, 100, view)
        client.close()
    sent = {k.lower() for k in server.seen[0]}
    assert "authorization" not in sent and sent <= {"host", "range", "accept-encoding"}


# -- over TLS, read by the process's reader thread (fetch_reader) ---------------------------------

def _certificate(tmp_path):
    """A self-signed certificate for 127.0.0.1, as the testbed's TLS CDN makes its own."""
    pem, key_pem = tmp_path / "cert.pem", tmp_path / "key.pem"
    hubtls.self_signed("127.0.0.1", pem, key_pem)
    return pem, key_pem


@contextmanager
def serving_tls(tmp_path, handler=Ranged):
    import ssl
    pem, key = _certificate(tmp_path)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.connections, server.seen, server.cut_at = 0, [], None
    side = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    side.load_cert_chain(pem, key)
    server.socket = side.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server, f"https://127.0.0.1:{server.server_address[1]}/blob", ssl.create_default_context(cafile=str(pem))
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_many_connections_over_tls_each_get_exactly_their_ranges(tmp_path):
    """Eight connections at once, each reading its own ranges through the one reader thread."""
    results, errors = {}, []

    def connection(i, url, tls):
        try:
            client, view = fetch_http.Client(10.0, tls), memoryview(bytearray(100_000))
            results[i] = [read_range(client, url, s, s + 131_071 + i, view) for s in (i * 7, 500_000 + i)]
            client.close()
        except Exception as e:  # the assertion below names it
            errors.append(e)

    with serving_tls(tmp_path) as (server, url, tls):
        threads = [threading.Thread(target=connection, args=(i, url, tls)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert not errors
    for i, (first, second) in results.items():
        assert first == BODY[i * 7:i * 7 + 131_071 + i]
        assert second == BODY[500_000 + i:500_000 + i + 131_071 + i]
    assert fetch_reader.reader().thread is not None   # the bodies went through it
    assert server.connections == 8


class OneWrite(http.server.BaseHTTPRequestHandler):
    """Status line, headers and body in one write: http.client's header reads take body bytes
    into its buffered reader, which must come out first and once."""
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        start, _, end = self.headers["Range"].removeprefix("bytes=").partition("-")
        part = BODY[int(start):int(end) + 1]
        head = (f"HTTP/1.1 206 Partial Content\r\nContent-Length: {len(part)}\r\n"
                f"Content-Range: bytes {start}-{end}/{len(BODY)}\r\n\r\n").encode()
        self.wfile.write(head + part)

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("view_bytes", [4096, 8192, 8193, 65536])
def test_body_bytes_read_with_the_headers_come_first_and_once(tmp_path, view_bytes):
    with serving_tls(tmp_path, OneWrite) as (server, url, tls):
        client = fetch_http.Client(10.0, tls)
        view = memoryview(bytearray(view_bytes))
        for start, end in ((0, 300), (1000, 30_000), (5, 200_005)):
            assert read_range(client, url, start, end, view) == BODY[start:end]
        client.close()


class Stalls(http.server.BaseHTTPRequestHandler):
    """Sends the first 1000 bytes of a range, then nothing while the connection stays open."""
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self.send_response(206)
        self.send_header("Content-Length", "100000")
        self.end_headers()
        self.wfile.write(BODY[:1000])
        self.wfile.flush()
        self.server.release.wait(10)

    def log_message(self, *args):
        pass


def test_a_stalled_body_hands_over_what_came_then_times_out(tmp_path):
    with serving_tls(tmp_path, Stalls) as (server, url, tls):
        server.release = threading.Event()
        client = fetch_http.Client(0.5, tls)
        view, got = memoryview(bytearray(65536)), 0
        try:
            with pytest.raises(TimeoutError), client.stream("GET", url, {"Range": "bytes=0-99999"}) as answer:
                while got < 1000:
                    got += answer.fill(view[got:])
                assert got == 1000 and bytes(view[:1000]) == BODY[:1000]
                answer.fill(view)   # nothing more comes: the connection's timeout, as a blocking read
        finally:
            server.release.set()
            client.close()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")   # the thread's own end
def test_a_reader_thread_that_dies_hands_its_error_to_the_fill_and_the_next_fill_gets_a_new_one(tmp_path, monkeypatch):
    """Its callers get the error at once, not after their timeout (then a thread that stopped
    answering would be named instead); the next fill starts a new reader thread."""
    real = fetch_reader.Reader._read

    def broken(self, job):
        raise MemoryError("the reader thread's own failure")
    with serving_tls(tmp_path) as (server, url, tls):
        client = fetch_http.Client(30.0, tls)
        monkeypatch.setattr(fetch_reader.Reader, "_read", broken)
        with pytest.raises(MemoryError, match="own failure"):
            read_range(client, url, 0, 200_000, memoryview(bytearray(65536)))
        monkeypatch.setattr(fetch_reader.Reader, "_read", real)
        client.close()
        assert read_range(client, url, 0, 200_000, memoryview(bytearray(65536))) == BODY[:200_000]
        client.close()


class Trickles(http.server.BaseHTTPRequestHandler):
    """A slow edge: the range comes in pieces 0.2 s apart, over four times the client's timeout."""
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self.send_response(206)
        self.send_header("Content-Length", str(20 * 5000))
        self.end_headers()
        for i in range(20):
            self.wfile.write(BODY[i * 5000:(i + 1) * 5000])
            self.wfile.flush()
            time.sleep(0.2)

    def log_message(self, *args):
        pass


def test_a_body_slower_than_the_timeout_but_never_silent_for_it_is_read_whole(tmp_path):
    """The timeout is for silence, not for the body: a 16 GB shard's range on an 8.7 MB/s edge
    lasts minutes against a 10 s timeout (here 4 s of body against 0.5 s)."""
    with serving_tls(tmp_path, Trickles) as (server, url, tls):
        client = fetch_http.Client(0.5, tls)
        assert read_range(client, url, 0, 100_000, memoryview(bytearray(65536))) == BODY[:100_000]
        client.close()

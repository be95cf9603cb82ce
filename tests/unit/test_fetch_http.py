"""remote/fetch_http.py: the CDN connection on http.client, against a stdlib HTTP/1.1 server on
127.0.0.1 that keeps connections alive (as a CDN does) and counts them."""

from __future__ import annotations

import http.client
import http.server
import socket
import threading
from contextlib import contextmanager

import pytest

import k3deploy.remote.fetch_weights  # noqa: F401 (puts the node-side directory on sys.path)
import fetch_http  # noqa: E402

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

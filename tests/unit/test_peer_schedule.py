"""The fan-out schedule asks a waiting file again when its recheck time comes, or at once when
a peer's index newly lists it verified: the owner's verify reaches the others without waiting
out RECHECK. No I/O: specs and indexes faked."""

import importlib
import json
import pytest
from types import SimpleNamespace

import k3deploy.remote.fetch_weights  # noqa: F401 (puts the node-side directory on sys.path)

peer_fetch = importlib.import_module("peer_fetch")
fetch_http = importlib.import_module("fetch_http")
peer_schedule = importlib.import_module("peer_schedule")


def spec(n: int):
    return SimpleNamespace(path=f"model-{n:05d}.safetensors", etag=f"{n:064x}")


def test_a_file_is_due_at_its_recheck_time_or_when_a_peer_newly_lists_it():
    later = [(10.0, spec(1)), (10.4, spec(2)), (10.4, spec(3))]
    assert peer_schedule.due(later, 10.1, set()) == later[:1]
    assert peer_schedule.due(later, 10.1, {spec(3).etag}) == [later[0], later[2]]


def test_only_what_an_index_adds_is_news_and_news_is_taken_once(monkeypatch):
    block = {"self": "node0", "port": 8951, "stall_seconds": 30, "owner": {},
             "nodes": {"node1": "10.0.0.2"}}
    made = peer_fetch.Peers(block, "s" * 32, None, RuntimeError, lambda _: None, set())
    answers = [[spec(1).etag], [spec(1).etag, spec(2).etag]]

    def request(peer, method, path, headers=None, timeout=None):
        body = json.dumps({"verified": answers.pop(0), "partial": {}}).encode()
        return SimpleNamespace(close=lambda: None), SimpleNamespace(status=200, read=lambda: body)
    monkeypatch.setattr(made, "_request", request)
    peer = made.peers["node1"]
    made._fresh_index(peer)
    assert made.take_news() == {spec(1).etag} and made.take_news() == set()
    peer.index_at = 0.0   # the index is due again
    made._fresh_index(peer)
    assert made.take_news() == {spec(2).etag}


class Piecewise:
    """A response body the socket hands over in small pieces, then loses (the peer or the
    receiver died)."""

    def __init__(self, pieces):
        self.pieces = list(pieces)

    def readinto1(self, view):
        if not self.pieces:
            raise ConnectionResetError("connection reset by peer")
        piece = self.pieces.pop(0)
        view[:len(piece)] = piece
        return len(piece)


class Arrived:
    """A body whose bytes all sit in the socket already: each read takes all the view holds."""

    def __init__(self, size: int):
        self.left = size

    def readinto1(self, view):
        n = min(len(view), self.left)
        view[:n] = b"x" * n
        self.left -= n
        return n


class Part:
    """The partial blob as _copy writes it: each append kept as (offset, bytes)."""
    prefix = 0

    def __init__(self):
        self.written: list[tuple[int, bytes]] = []

    def open(self):
        return open("/dev/null", "r+b")

    def append(self, f, data, source, offset):
        self.written.append((offset, bytes(data)))

    def finish(self, f):
        pass


def copy(body, size: int, part: Part) -> None:
    """_copy of a `size`-byte file from `body`: http.client's HTTPResponse as fetch_http.Answer
    reads it (its buffered socket and the body's length left, not chunked)."""
    block = {"self": "node0", "port": 8951, "stall_seconds": 30, "owner": {},
             "nodes": {"node1": "10.0.0.2"}}
    made = peer_fetch.Peers(block, "s" * 32, SimpleNamespace(is_set=lambda: False), RuntimeError,
                            lambda _: None, set())
    response = SimpleNamespace(fp=body, status=200, headers={}, chunked=False, length=size,
                               read=lambda: b"")
    made._copy(made.peers["node1"], SimpleNamespace(size=size), part, response)


def test_peer_bytes_that_arrived_reach_the_disk_when_the_connection_is_cut():
    # A cut-off receiver keeps what arrived: the pieces gathered into a buffer are written
    # before the error is raised, not dropped with the buffer (then fetched again).
    part = Part()
    with pytest.raises(ConnectionResetError):
        copy(Piecewise([b"a" * 1000, b"b" * 1000, b"c" * 500]), 10_000_000, part)
    written = part.written
    assert b"".join(d for _, d in written) == b"a" * 1000 + b"b" * 1000 + b"c" * 500
    assert written[0][0] == 0 and all(o == sum(len(d) for _, d in written[:i]) for i, (o, _) in enumerate(written))


def test_a_killed_receiver_holds_a_small_share_of_a_small_file_and_4_mib_of_a_shard():
    # What a SIGKILL can lose is the two buffers: for a 300 kB file arriving in one socket read
    # that must not be the whole file (then received whole twice), for a 16 GB shard the buffer
    # is the full 4 MiB (few writes per GB).
    part, size = Part(), 300_000
    copy(Arrived(size), size, part)
    lengths = [len(d) for _, d in part.written]
    assert sum(lengths) == size and 2 * max(lengths) <= 128 << 10, lengths
    assert fetch_http.fill_bytes(16 << 30, peer_fetch.BUFFER) == 4 << 20

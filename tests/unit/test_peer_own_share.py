"""A node's own fan-out share is asked of its peers first: a node that replaces a reclaimed one
(an empty disk) finds its share on the peers that took it from its predecessor, and the Hub
serves it again only when no peer holds it (a first bring-up). No I/O: peers' indexes faked."""

import importlib
import json
import threading
import time
from types import SimpleNamespace

import pytest

import k3deploy.remote.fetch_weights  # noqa: F401 (puts the node-side directory on sys.path)

peer_fetch = importlib.import_module("peer_fetch")
ETAG = "e" * 64
SPEC = SimpleNamespace(path="model-00003-of-00096.safetensors", etag=ETAG, size=10)


def peers(monkeypatch, verified: dict[str, list[str]]) -> peer_fetch.Peers:
    """node2's view; `verified`: what each peer's index lists (a missing peer: unreachable)."""
    block = {"self": "node2", "port": 8951, "stall_seconds": 30,
             "owner": {SPEC.path: "node2", "other.safetensors": "node0"},
             "nodes": {"node0": "10.0.0.1", "node1": "10.0.0.2", "node3": "10.0.0.4"}}
    made = peer_fetch.Peers(block, "s" * 32, None, RuntimeError, lambda _: None, set())

    def request(peer, method, path, headers=None, timeout=None):
        if peer.name not in verified:
            raise OSError("Connection refused")
        body = json.dumps({"verified": verified[peer.name], "partial": {}}).encode()
        return SimpleNamespace(close=lambda: None), SimpleNamespace(status=200, read=lambda: body)

    monkeypatch.setattr(made, "_request", request)
    return made


def test_every_large_file_goes_to_the_peers_first_its_own_share_too(monkeypatch):
    made = peers(monkeypatch, {})
    assert made.wants(SPEC) and made.wants(SimpleNamespace(path="other.safetensors"))
    assert not made.wants(SimpleNamespace(path="config.json"))  # small files: the Hub


def test_a_replaced_node_takes_its_own_share_from_a_peer_that_holds_it(monkeypatch):
    made = peers(monkeypatch, {"node0": [], "node1": [ETAG], "node3": [ETAG]})
    made.ready(SPEC)   # no NotYet, no UseHub: fetch() reads it from a holder
    assert sorted(p.name for p in made.holders(SPEC)) == ["node1", "node3"]


def test_a_first_bring_up_sends_its_own_share_to_the_hub_once_every_peer_answered(monkeypatch):
    made = peers(monkeypatch, {"node0": [], "node1": []})   # node3's server is not up
    with pytest.raises(peer_fetch.UseHub, match="this node's own share"):
        made.ready(SPEC)


def _in_flight(made, name: str, seconds: float) -> threading.Timer:
    """Another worker's index request to `name`, answered `seconds` from now."""
    made.peers[name].lock.acquire()
    timer = threading.Timer(seconds, made.peers[name].lock.release)
    timer.start()
    return timer


def test_an_index_another_worker_is_still_asking_for_is_not_taken_for_no_holder(monkeypatch):
    made = peers(monkeypatch, {"node0": [], "node1": [ETAG], "node3": []})
    timer = _in_flight(made, "node1", 0.2)
    with pytest.raises(peer_fetch.NotYet):   # it waited for that answer: node1 holds the file
        made.ready(SPEC)
    timer.join()
    assert ETAG in made.news   # asked again at once (the scheduler's _due), not a RECHECK later
    made.ready(SPEC)


def test_a_first_bring_up_waits_for_the_indexes_in_flight_not_for_a_recheck(monkeypatch):
    # At start every worker asks at once: one asks each peer, the others wait for its answer
    # and take their own share to the Hub as soon as every peer said it holds none of it.
    made = peers(monkeypatch, {"node0": [], "node1": [], "node3": []})
    timer = _in_flight(made, "node3", 0.2)
    started = time.monotonic()
    with pytest.raises(peer_fetch.UseHub, match="this node's own share"):
        made.ready(SPEC)
    timer.join()
    assert time.monotonic() - started < peer_fetch.INDEX_TIMEOUT


def test_an_owner_index_newer_than_the_holders_seen_is_not_taken_for_done_without_it(monkeypatch):
    # Reproduced under load (CI failed the same way): a worker's holders() read node0's index
    # as another worker was refreshing it (no 00093 yet); the refreshed one, read next, said
    # "done" and listed 00093: the file was taken from the Hub by a second node.
    other = SimpleNamespace(path="other.safetensors", etag="f" * 64, size=10)
    made = peers(monkeypatch, {})
    body = json.dumps({"verified": [other.etag], "partial": {}, "downloader": "done"}).encode()
    monkeypatch.setattr(made, "_request", lambda *a, **k: (SimpleNamespace(close=lambda: None),
                                                           SimpleNamespace(status=200, read=lambda: body)))
    monkeypatch.setattr(made, "holders", lambda spec: [])   # what the older index said
    with pytest.raises(peer_fetch.NotYet):
        made.ready(other)
    assert other.etag in made.take_news()   # asked again on the scheduler's next tick

"""The peer index's cost grows with the cluster: each node asks each of its peers what it holds.
On 32 nodes that was ~2,000 requests a second, each opening every blob, and the CPU it took
starved the Hub downloads into timeouts. Bounded on both sides: the asker reuses an index longer
as peers grow, the server answers from one build for INDEX_REUSE seconds. No I/O: fake clocks."""

import importlib
import json
from types import SimpleNamespace

import pytest

import k3deploy.remote.fetch_weights  # noqa: F401 (puts the node-side directory on sys.path)

peer_fetch = importlib.import_module("peer_fetch")
peer_blobs = importlib.import_module("peer_blobs")


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def peers(count: int, monkeypatch, clock) -> tuple[peer_fetch.Peers, list[str]]:
    names = {f"node{i}": f"10.0.0.{i}" for i in range(1, count + 1)}
    block = {"self": "node0", "port": 8951, "owner": {}, "nodes": names, "stall_seconds": 30}
    made = peer_fetch.Peers(block, "s" * 32, None, RuntimeError, lambda _: None, set())
    asked: list[str] = []

    class Answer:
        status = 200

        def read(self):
            return json.dumps({"verified": [], "partial": {}}).encode()

    def request(peer, method, path, headers=None, timeout=None):
        asked.append(peer.name)
        return SimpleNamespace(close=lambda: None), Answer()

    monkeypatch.setattr(made, "_request", request)
    monkeypatch.setattr(peer_fetch.time, "monotonic", clock)
    return made, asked


@pytest.mark.parametrize("count,ttl", [(3, peer_fetch.INDEX_TTL), (31, 3.1)])
def test_a_node_asks_each_peer_for_its_index_less_often_the_more_peers_it_has(
        monkeypatch, count, ttl):
    clock = Clock()
    made, asked = peers(count, monkeypatch, clock)
    spec = SimpleNamespace(etag="e" * 64)
    assert made.index_ttl == pytest.approx(ttl)
    for _ in range(50):   # 16 workers waiting on files: holders() runs often
        made.holders(spec)
        clock.now += 0.05  # 2.5 s in all
    assert sorted(set(asked)) == sorted(made.peers)
    assert len(asked) / count == pytest.approx(1 + int(2.5 / ttl), abs=1), asked


def test_the_server_builds_its_index_once_for_all_peers_asking_at_once(tmp_path, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(peer_blobs.time, "monotonic", clock)
    manifest = SimpleNamespace(files=[SimpleNamespace(etag="a" * 64, size=10)])
    cache = SimpleNamespace(ledger=tmp_path / "ledger.json",
                            blob=lambda etag: tmp_path / etag,
                            partial=lambda etag: tmp_path / f"{etag}.incomplete")
    blobs = peer_blobs.Blobs(manifest, cache)
    first = blobs.index()
    assert first["verified"] == [] and first["partial"] == {}
    (tmp_path / f"{'a' * 64}.incomplete").write_bytes(b"12345")
    assert [blobs.index() for _ in range(30)] == [first] * 30   # 30 peers, one build
    clock.now += peer_blobs.INDEX_REUSE
    assert blobs.index()["partial"] == {"a" * 64: 5}            # then it is current again


def test_a_done_in_the_index_comes_with_every_file_the_downloader_verified(tmp_path):
    # The downloader writes "done" after its last verify. Read after the blobs, a download
    # finishing in between showed "done" beside a list without its last file: a peer waiting
    # for it would take it from the Hub too. The state is read first, so "done" means complete.
    etag = "a" * 64
    manifest = SimpleNamespace(files=[SimpleNamespace(etag=etag, size=10)])
    cache = SimpleNamespace(ledger=tmp_path / "ledger.json", blob=lambda e: tmp_path / e,
                            partial=lambda e: tmp_path / f"{e}.incomplete")
    progress = tmp_path / "progress.json"
    progress.write_text(json.dumps({"state": "running"}))
    blobs = peer_blobs.Blobs(manifest, cache, progress)
    checked = []

    def verify_then_finish(e):   # the last file is verified and "done" written during the look
        checked.append(e)
        progress.write_text(json.dumps({"state": "done"}))
        return None
    blobs.open = verify_then_finish
    doc = blobs._build_index()
    assert checked == [etag]
    assert doc["downloader"] == "running"   # what it said before the list: not "done" without it

"""k3deploy/remote/peer_server.py and the peer path of fetch_weights.py on loopback (no root).

Each simulated node gets its own loopback address (127.0.0.x) and HF_HOME; the servers and
downloaders run as subprocesses, as on a node. Hub bytes come from the in-process mock Hub.
"""
from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "scripts"))

from tb import hub as tbhub

from k3deploy.cluster import fanout
from k3deploy.cluster.hubmeta import Manifest as LaptopManifest
from k3deploy.cluster.hubmeta import RepoFile

REMOTE = REPO_ROOT / "k3deploy" / "remote"
SECRET = "peer-secret-for-tests-0123456789"
PORT = 18951 + os.getpid() % 1000


def clean_env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}


def laptop_manifest(hub) -> LaptopManifest:
    files = tuple(RepoFile(f.path, f.size, f.sha256, None if f.is_lfs else f.git_oid) for f in hub.repo.files)
    return LaptopManifest(hub.repo.repo_id, "main", hub.repo.sha, hub.url, files)


class FakeInv:
    """What fanout.peer_block reads of an inventory."""

    def __init__(self, names):
        self.ports = type("P", (), {"peer": PORT})()
        self.nodes = [type("N", (), {"name": n, "self_ip": f"127.0.0.{i + 2}"})() for i, n in enumerate(names)]

    def ranked(self):
        return list(enumerate(self.nodes))


class PeerNode:
    """One node: its HF_HOME, manifest (with the peers block), peer server and downloader."""

    def __init__(self, root: Path, hub, name: str, names: list[str], stall: float = 3.0, workers: int = 4):
        self.root, self.name, self.hub = root / name, name, hub
        self.root.mkdir(parents=True)
        self.ip = f"127.0.0.{names.index(name) + 2}"
        self.hf_home, self.progress = self.root / "hf", self.root / "progress.json"
        self.secret_file = self.root / "peer.secret"
        self.secret_file.write_text(SECRET + "\n")
        self.secret_file.chmod(0o600)
        doc = laptop_manifest(hub).to_json(workers)
        doc["peers"] = fanout.peer_block(FakeInv(names), laptop_manifest(hub), name,
                                         str(self.secret_file), stall)
        self.owner = doc["peers"]["owner"]
        self.manifest = self.root / "manifest.json"
        self.manifest.write_text(json.dumps(doc))
        self.served_log = self.root / "served.jsonl"
        self.corrupt_flag = self.root / "corrupt"
        self.server = None

    def start_server(self, *extra: str) -> None:
        argv = [sys.executable, str(REMOTE / "peer_server.py"), "--manifest", str(self.manifest),
                "--hf-home", str(self.hf_home), "--listen", f"{self.ip}:{PORT}", "--secret-file",
                str(self.secret_file), "--served-log", str(self.served_log),
                "--test-corrupt-flag", str(self.corrupt_flag), "--progress", str(self.progress), *extra]
        self.server = subprocess.Popen(argv, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                request(self, "GET", "/index")
                return
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"peer server of {self.name} did not come up: {self.stop_server()}")

    def stop_server(self) -> str:
        if self.server and self.server.poll() is None:
            self.server.send_signal(signal.SIGTERM)
        return self.server.communicate(timeout=10)[0].decode() if self.server else ""

    def fetch_argv(self) -> list[str]:
        return [sys.executable, str(REMOTE / "fetch_weights.py"), "--manifest", str(self.manifest),
                "--hf-home", str(self.hf_home), "--progress", str(self.progress)]

    def start_fetch(self) -> subprocess.Popen:
        return subprocess.Popen(self.fetch_argv(), env=clean_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)

    def read_progress(self) -> dict:
        return json.loads(self.progress.read_text())

    def served(self) -> list[dict]:
        if not self.served_log.exists():
            return []
        return [json.loads(line) for line in self.served_log.read_text().splitlines()]

    def blob(self, f) -> Path:
        return self.hf_home / "hub" / "models--moonshotai--Kimi-K3" / "blobs" / f.etag

    def cache_partial(self, f) -> Path:
        """Where the downloader keeps a partial (protocol.partial_path)."""
        from k3deploy.remote import protocol
        return Path(protocol.partial_path(str(self.blob(f).parents[1]), f.etag))


def request(node: PeerNode, method: str, path: str, headers: dict | None = None, secret: str | None = SECRET):
    conn = http.client.HTTPConnection(node.ip, PORT, timeout=10)
    try:
        sent = dict(headers or {})
        if secret is not None:
            sent["Authorization"] = f"Bearer {secret}"
        conn.request(method, path, headers=sent)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def fresh_index(node: PeerNode, current, seconds: float = 10.0) -> dict:
    """The node's index once `current(index)` holds: the server answers from one build for
    peer_blobs.INDEX_REUSE seconds, so a change on disk shows a moment later."""
    deadline = time.monotonic() + seconds
    while True:
        doc = json.loads(request(node, "GET", "/index")[2])
        if current(doc) or time.monotonic() > deadline:
            return doc
        time.sleep(0.05)


@pytest.fixture
def hub(tmp_path):
    with tbhub.serve_in_thread(tmp_path / "hub", shards=8, shard_bytes=120_000) as handle:
        yield handle


@pytest.fixture
def nodes(tmp_path, hub):
    made: list[PeerNode] = []

    def make(names, stall=3.0, workers=4, via=hub):
        made.extend(PeerNode(tmp_path, via, n, names, stall, workers) for n in names)
        return made
    yield make
    for node in made:
        node.stop_server()


def hub_bytes(hub) -> int:
    return sum(n["bytes"] for n in hub.stats()["by_node"].values())


def test_peer_server_refuses_everything_but_verified_blobs_with_the_secret(nodes, hub):
    (node,) = nodes(["node0"])[:1]
    assert subprocess.run(node.fetch_argv(), env=clean_env(), capture_output=True, timeout=60, check=False).returncode == 0
    node.start_server()
    shard, other = (hub.repo.file(n) for n in hub.repo.shard_names()[:2])
    path = f"/blobs/{shard.etag}"
    status, headers, body = request(node, "GET", path)
    assert status == 200 and body == hub.repo.local_path(shard.path).read_bytes()
    status, headers, body = request(node, "GET", path, {"Range": "bytes=1000-"})
    assert status == 206 and headers["Content-Range"] == f"bytes 1000-{shard.size - 1}/{shard.size}"
    assert body == hub.repo.local_path(shard.path).read_bytes()[1000:]
    assert request(node, "HEAD", path)[0] == 200
    assert request(node, "GET", path, {"Range": f"bytes={shard.size}-"})[0] == 416
    # no secret, a wrong one, the HF token scheme with another value
    assert request(node, "GET", path, secret=None)[0] == 401
    assert request(node, "GET", path, secret=SECRET + "x")[0] == 401
    assert request(node, "HEAD", path, secret="")[0] == 401
    assert request(node, "GET", "/index", secret=None)[0] == 401
    # paths that are not a manifest blob's etag, however spelled
    for bad in ("/blobs/../../../../etc/passwd", "/etc/passwd", "/blobs/%2e%2e/manifest.json",
                f"/blobs/{shard.etag}/../{other.etag}", f"/blobs/{shard.etag}%00", f"/blobs/{shard.etag}?x=1",
                "/blobs/" + "0" * 64, f"/blobs/{shard.etag.upper()}",
                str(node.blob(shard)), "/blobs/..%2f..%2fpeer.secret"):
        assert request(node, "GET", bad)[0] == 404, bad
    # unverified: a blob on disk the ledger does not vouch for, and a partial
    blob = node.blob(other)
    blob.write_bytes(blob.read_bytes())  # same bytes, new mtime: no longer what was verified
    assert request(node, "GET", f"/blobs/{other.etag}")[0] == 404
    blob.rename(node.cache_partial(other))
    status, headers, _ = request(node, "HEAD", f"/blobs/{other.etag}")
    assert status == 404 and headers["X-K3-Partial"] == str(other.size)
    index = fresh_index(node, lambda doc: other.etag in doc["partial"])
    assert shard.etag in index["verified"] and other.etag not in index["verified"]
    assert index["partial"][other.etag] == other.size
    # A line is written once its body is sent, from the connection's own thread: the next
    # request may be logged first.
    served = sorted((s["etag"], s["start"], s["bytes"]) for s in node.served())
    assert served == [(shard.etag, 0, shard.size), (shard.etag, 1000, shard.size - 1000)]
    output = node.stop_server()
    assert SECRET not in output


def test_fan_out_fetches_each_large_file_from_the_hub_once(nodes, hub):
    # Every owner is alive here: a stall bound a loaded 2-core CI box cannot reach by accident
    # (3 s did, once: a slow owner's file then came from the Hub too). The fallback itself is
    # test_dead_owner_falls_back_to_the_hub_after_the_stall_bound's.
    cluster = nodes(["node0", "node1", "node2"], stall=30.0)
    for node in cluster:
        node.start_server()
    procs = [node.start_fetch() for node in cluster]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outputs
    stats = hub.stats()["by_node"]["127.0.0.1"]["files"]
    small = [f for f in hub.repo.files if not f.is_lfs]
    for f in hub.repo.files:
        gets = stats[f.path]["gets"]
        assert gets == (3 if f in small else 1), f.path
    for node in cluster:
        progress = node.read_progress()
        share = sum(f.size for f in hub.repo.files if node.owner.get(f.path) == node.name)
        smalls = sum(f.size for f in small)
        assert progress["hub_bytes"] == share + smalls, node.name
        assert progress["peer_bytes"] == hub.repo.total_bytes - share - smalls
        for f in hub.repo.files:
            assert node.blob(f).read_bytes() == hub.repo.local_path(f.path).read_bytes()
    assert hub_bytes(hub) == hub.repo.total_bytes + 2 * sum(f.size for f in small)


def test_corrupt_peer_is_named_and_not_used_again(nodes, tmp_path):
    with tbhub.serve_in_thread(tmp_path / "hub16", shards=16, shard_bytes=60_000) as hub:
        corrupt_peer_run(nodes(["node0", "node1"], stall=2.0, workers=2, via=hub), hub)


def corrupt_peer_run(cluster, hub):
    first, second = cluster
    assert subprocess.run(first.fetch_argv(), env=clean_env(), capture_output=True, timeout=60, check=False).returncode == 0
    first.corrupt_flag.touch()
    first.start_server()
    second.start_server()
    proc = second.start_fetch()
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode == 0, output
    assert "bytes from peer node0 fail the checksum; that peer is not used again" in output
    assert second.read_progress()["bad_peers"] == ["node0"]
    # node1 wants 8 shards of node0; once one failed, only the other one in flight was sent
    assert len(first.served()) <= 2
    for f in hub.repo.files:
        assert second.blob(f).read_bytes() == hub.repo.local_path(f.path).read_bytes()


def test_dead_owner_falls_back_to_the_hub_after_the_stall_bound(nodes, hub):
    cluster = nodes(["node0", "node1"], stall=1.5)
    cluster[1].start_server()  # node0's server never starts: its share must come from the Hub
    proc = cluster[1].start_fetch()
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode == 0, output
    assert "its owner node0 is unreachable" in output
    assert cluster[1].read_progress()["peer_bytes"] == 0


def test_owner_whose_download_failed_sends_its_share_to_the_hub_at_once(nodes, hub):
    owner, fetcher = nodes(["node0", "node1"], stall=120.0)  # the bound is never what ends it
    owner.progress.write_text(json.dumps({"state": "failed", "error": "disk full"}))
    owner.start_server()
    fetcher.start_server()
    started = time.monotonic()
    proc = fetcher.start_fetch()
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode == 0, output
    assert time.monotonic() - started < 60
    assert "its owner node0's download failed without it" in output


def _slow_blob_client(node, etag: str):
    """A client that holds the server's one slot: it reads 12 bytes of a 48 MB answer and stops.
    start_server's own probe frees the slot only once the server has seen that client close,
    so the first try may still find it taken."""
    import socket
    deadline = time.monotonic() + 10
    while True:
        slow = socket.socket()
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.connect((node.ip, PORT))
        slow.sendall(f"GET /blobs/{etag} HTTP/1.1\r\nHost: x\r\n"
                     f"Authorization: Bearer {SECRET}\r\n\r\n".encode())
        status = slow.recv(12)
        if status == b"HTTP/1.1 200":
            return slow
        slow.close()
        assert status == b"HTTP/1.1 503" and time.monotonic() < deadline, status
        time.sleep(0.1)


def test_requests_beyond_max_connections_get_503(nodes, tmp_path):
    with tbhub.serve_in_thread(tmp_path / "big", shards=1, shard_bytes=48 << 20) as big:
        (node,) = nodes(["node0"], via=big)
        assert subprocess.run(node.fetch_argv(), env=clean_env(), capture_output=True, timeout=120,
                              check=False).returncode == 0
        node.start_server("--max-connections", "1")
        shard = big.repo.file(big.repo.shard_names()[0])
        slow = _slow_blob_client(node, shard.etag)
        try:
            assert request(node, "GET", "/index")[0] == 503
            assert request(node, "HEAD", f"/blobs/{shard.etag}")[0] == 503
        finally:
            slow.close()
        deadline = time.monotonic() + 30  # the slot comes back when that client is gone
        while request(node, "GET", "/index")[0] != 200:
            assert time.monotonic() < deadline
            time.sleep(0.1)

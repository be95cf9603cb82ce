"""scripts/bench --fanout: weights-ready time with peer fan-out against Hub-only, and the peer
path's rate for one 256 MB blob next to curl's from the same peer server. Prints, asserts nothing.

Weights-ready: `k3deploy run resume-download` (nvme + download) on bare testbed nodes, once with
`download: {peers: false}` (every node from the Hub) and once with fan-out (the default), the
mock Hub capped per node (`--hub-node-rate`) so that Hub-only takes at least 30 s.
Blob rate: a peer server and the downloader on two loopback addresses of this machine (the
testbed's veths add a copy the real NICs do not): the downloader fetches one 256 MB blob from
the peer (and sha256-verifies it, fsyncs it), then curl fetches the same blob from the same
server into a file on the same filesystem.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
REMOTE = REPO / "k3deploy" / "remote"
HUB_ONLY_SECONDS = 30


def _sh(*argv, **kw):
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, check=False, **kw)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(map(str, argv))} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return proc


def _weights_ready(nodes: int, node_rate: int, peers: bool, hub_flags: list[str] | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="k3bench-") as tmp:
        tb = Path(tmp) / "tb"
        try:
            _sh(PY, "scripts/testbed", "up", "--dir", str(tb), "--nodes", str(nodes),
                *(hub_flags or ["--hub-rate", "0", "--hub-node-rate", str(node_rate)]))
            inv = tb / "inventory.yaml"
            if not peers:
                with open(inv, "a") as fh:
                    fh.write("download: {peers: false}\n")
            busy0, started = busy_seconds(), time.monotonic()
            _sh(PY, "-m", "k3deploy", "run", "resume-download", "-i", str(inv))
            seconds = time.monotonic() - started
            busy = (busy_seconds() - busy0) / seconds
            stats = json.loads(_sh(PY, "scripts/testbed", "stats", "--dir", str(tb), "--json").stdout)
            hub, cdn = stats["hub"], stats.get("cdn") or {}
            spans = _downloader_spans(tb)
        finally:
            subprocess.run([PY, "scripts/testbed", "down", "--dir", str(tb)], capture_output=True, cwd=REPO,
                           check=False)
    # with --hub-cdn the large files' bytes come from the CDN (its own counters)
    served = sum(n["bytes"] for n in hub["by_node"].values()) + (cdn.get("bytes") or 0)
    return {"seconds": round(seconds, 1), "hub_over_repo": round(served / hub["repo_bytes"], 3),
            "repo_bytes": hub["repo_bytes"], "downloader_s": round(max(spans), 1),
            "machine_cores_busy": round(busy, 2), "cores": os.cpu_count()}


def busy_seconds() -> float:
    """CPU seconds this machine spent busy since boot: every simulated node, the mock Hub, the
    laptop side, and whatever else runs on the machine (the figures are only as good as the
    machine was quiet: with every core busy, both runs are CPU-bound, not link-bound)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def _downloader_spans(tb: Path) -> list[float]:
    """Each node's downloader, its first progress to done (its progress document): the run's
    wall time less the fixed costs (SSH, the nvme step, uploads, the last poll)."""
    sys.path.insert(0, str(REPO / "scripts"))
    from tb.sshcmd import ssh_argv
    spans = []
    for node in json.loads((tb / "testbed.json").read_text())["nodes"].values():
        doc = json.loads(_sh(*ssh_argv(tb, "root", node["address"],
                                       "cat /mnt/nvme/.k3deploy/download-progress.json")).stdout)
        spans.append(doc["updated"] - doc["started"])
    return spans


def fanout(nodes: int, hub_only_seconds: float = HUB_ONLY_SECONDS, extra=None, shard_bytes: int | None = None) -> dict:
    """hub_only_seconds: how long the Hub-only download should take; the longer, the smaller
    the share of the fixed costs (SSH, start-up, polling) that a real 1.56 TB download dwarfs.
    extra(node_rate): the testbed's Hub flags instead of a flat node link (benchhubcdn.py)."""
    repo_bytes = 28_810_927  # the testbed's repo (96 x 300 kB shards + small files)
    if shard_bytes:
        repo_bytes += 96 * (shard_bytes - 300_000)
    node_rate = int(repo_bytes / (hub_only_seconds + 2))
    flags = extra(node_rate) + (["--shard-bytes", str(shard_bytes)] if shard_bytes else []) if extra else None
    hub_only = _weights_ready(nodes, node_rate, peers=False, hub_flags=flags)
    peers = _weights_ready(nodes, node_rate, peers=True, hub_flags=flags)
    link_floor = hub_only["repo_bytes"] / node_rate
    return {"nodes": nodes, "hub_node_rate": node_rate, "hub_only_s": hub_only["seconds"],
            "peers_s": peers["seconds"], "ratio": round(peers["seconds"] / hub_only["seconds"], 2),
            "hub_over_repo_hub_only": hub_only["hub_over_repo"],
            "hub_over_repo_peers": peers["hub_over_repo"],
            # Beside the ratio, not instead of it: the downloaders' own spans (the run less its
            # fixed costs, which a 1.56 TB download dwarfs), the link floor of one node's Hub-only
            # download, and how busy the machine was (every node shares its cores).
            "link_floor_s": round(link_floor, 1),
            "hub_only_over_link_floor": round(hub_only["seconds"] / link_floor, 2),
            "downloader_hub_only_s": hub_only["downloader_s"], "downloader_peers_s": peers["downloader_s"],
            "downloader_ratio": round(peers["downloader_s"] / hub_only["downloader_s"], 2),
            "cores_busy_hub_only": hub_only["machine_cores_busy"], "cores_busy_peers": peers["machine_cores_busy"],
            "cores": hub_only["cores"]}


# -- one 256 MB blob peer-to-peer ---------------------------------------------------------------
BLOB = 256 * 1024 * 1024
SECRET = "bench-peer-secret-0123456789abcdef"


def _node(root: Path, name: str, blob: bytes | None, etag: str, owner_ip: str) -> Path:
    sys.path.insert(0, str(REMOTE))
    import protocol
    from fetch_cache import Ledger, RepoCache
    home = root / name
    cache = RepoCache(str(home / "hf"), "bench/blob")
    (home / "peer.secret").write_text(SECRET)
    os.chmod(home / "peer.secret", 0o600)
    doc = protocol.with_schema({"repo": "bench/blob", "revision": "main", "sha": "0" * 40, "endpoint": "http://127.0.0.1:9",
           "max_workers": 4, "files": [{"path": "blob.safetensors", "size": BLOB, "sha256": etag, "oid": None}],
           "peers": {"self": name, "port": 18950, "secret_file": str(home / "peer.secret"),
                     "nodes": {"owner": owner_ip}, "owner": {"blob.safetensors": "owner"}}})
    (home / "manifest.json").write_text(json.dumps(doc))
    if blob is not None:
        cache.blob(etag).write_bytes(blob)
        Ledger(cache.ledger).record(etag, cache.blob(etag))
    return home


def blob_rate() -> dict:
    blob = os.urandom(BLOB)
    etag = hashlib.sha256(blob).hexdigest()
    with tempfile.TemporaryDirectory(prefix="k3bench-blob-", dir="/dev/shm") as tmp:
        root = Path(tmp)
        owner = _node(root, "owner", blob, etag, "127.0.0.2")
        del blob
        fetcher = _node(root, "fetcher", None, etag, "127.0.0.2")
        server = subprocess.Popen([PY, str(REMOTE / "peer_server.py"), "--manifest", str(owner / "manifest.json"),
                                   "--hf-home", str(owner / "hf"), "--listen", "127.0.0.2:18950",
                                   "--secret-file", str(owner / "peer.secret"), "--served-log",
                                   str(owner / "served.jsonl"), "--ready-file", str(owner / "ready")])
        try:
            while not (owner / "ready").exists():
                if server.poll() is not None:   # it said why on stderr
                    sys.exit(f"the peer server exited with {server.returncode}")
                time.sleep(0.05)
            _sh(PY, str(REMOTE / "fetch_weights.py"), "--manifest", str(fetcher / "manifest.json"),
                "--hf-home", str(fetcher / "hf"), "--progress", str(fetcher / "progress.json"))
            headers = root / "curl-headers"
            headers.write_text(f"Authorization: Bearer {SECRET}\n")  # -H @file: not in argv
            _sh("curl", "-sf", "-H", f"@{headers}", "-o", str(root / "curl.out"),
                f"http://127.0.0.2:18950/blobs/{etag}")
        finally:
            server.terminate()
            server.wait()
        # Timed where both are served, first byte to last (process start-up is not the path)
        sends = [json.loads(line) for line in (owner / "served.jsonl").read_text().splitlines()]
        downloader, curl = (s["seconds"] for s in sends if s["bytes"] == BLOB)
    return {"blob_bytes": BLOB, "downloader_MBps": round(BLOB / downloader / 1e6),
            "curl_MBps": round(BLOB / curl / 1e6), "downloader_over_curl": round(curl / downloader, 2),
            "note": "loopback, one connection each; the downloader also sha256-verifies and fsyncs"}

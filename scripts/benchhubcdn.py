"""scripts/bench --hub-cdn: the Hub leg through the mock Hub's CDN with its per-connection speed
lottery (`--hub-conn-rates SLOW,FAST,FRACTION`) under a node link (`--hub-node-rate`). Prints,
asserts nothing.

One node at the real job's proportions (RATIOS beside REAL): the CDN over TLS with a first-byte
wait on every range, a fast edge 1/50 of the node's link, shards hundreds of ranges long, each
client into an empty directory:
  - k3deploy: `k3deploy run resume-download` (nvme + download) at each `--connections` count;
    the time is the node-side downloader's own, first progress to done (its progress document),
    plus the whole run's;
  - aria2c -x16 -s16 -j16 (Debian's aria2), -k1M: aria2's least piece, 1/191 of a shard here
    where its default 20 MiB is 1/775 of a real one;
  - hf download --max-workers 16 with HF_HUB_DISABLE_XET=1 (huggingface_hub's plain HTTP path);
beside the link floor, the repo's bytes over the node's link. Then fan-out weights-ready against
Hub-only at 4 and 8 nodes (scripts/benchfanout.py) with the lottery on, 2 MB shards: the ratio
of the two runs' wall times, and beside it the downloaders' own spans, Hub-only against its link
floor and the machine's busy cores. Every simulated node shares this machine's cores, so at 8
nodes both runs are CPU-bound; and each run's fixed costs (SSH, the nvme step, uploads, the peer
servers' start, the last poll; ~4-9 s) stand in both, which a 1.56 TB download dwarfs
(`--fanout-hub-seconds` makes the repo's share larger).
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
from tb.sshcmd import ssh_argv  # noqa: E402

PY = sys.executable
SHARD_BYTES = 2_000_000        # 96 shards: a 192 MB repo
LINK = 6_400_000               # the fan-out's node link: a 30 s floor for that repo
FRACTION = 0.7


def _sh(*argv, check=True, **kw):
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, check=False, **kw)
    if check and proc.returncode != 0:
        sys.exit(f"{' '.join(map(str, argv))} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return proc


def lottery_flags(link: int = LINK) -> list[str]:
    """Eight fast connections fill the link; a slow edge is 1:8 of a fast one (xet-core#821:
    8.7 vs 68 MB/s)."""
    fast = link // 8
    return ["--hub-cdn", "--hub-rate", "0", "--hub-node-rate", str(link),
            "--hub-conn-rates", f"{fast // 8},{fast},{FRACTION}"]


class Node:
    def __init__(self, tb: Path):
        doc = json.loads((tb / "testbed.json").read_text())["nodes"]
        self.tb, self.address = tb, next(iter(doc.values()))["address"]

    def run(self, command: str, timeout: float = 1800) -> tuple[float, subprocess.CompletedProcess]:
        began = time.monotonic()
        proc = _sh(*ssh_argv(self.tb, "root", self.address, command), check=False, timeout=timeout)
        return time.monotonic() - began, proc


def _repo(endpoint: str) -> tuple[str, list[dict]]:
    with urllib.request.urlopen(f"{endpoint}/api/models/moonshotai/Kimi-K3/revision/main") as r:
        sha = json.loads(r.read())["sha"]
    with urllib.request.urlopen(f"{endpoint}/api/models/moonshotai/Kimi-K3/tree/{sha}?recursive=true") as r:
        files = [f for f in json.loads(r.read()) if f["type"] == "file"]
    return sha, files


def _aria2(node: Node, endpoint: str, sha: str, files: list[dict], piece: str = "1M") -> dict:
    lines = [f"{endpoint}/moonshotai/Kimi-K3/resolve/{sha}/{f['path']}\n  out={f['path']}" for f in files]
    listing = "/mnt/nvme/aria2/urls.txt"
    node.run(f"mkdir -p /mnt/nvme/aria2 && cat > {listing} <<'EOF'\n" + "\n".join(lines) + "\nEOF")
    argv = ["aria2c", "-x16", "-s16", "-j16", f"-k{piece}", "--file-allocation=none", "--console-log-level=warn",
            "--summary-interval=0", "-d", "/mnt/nvme/aria2", "-i", listing]
    seconds, proc = node.run(shlex.join(argv))
    ok = proc.returncode == 0
    node.run("rm -rf /mnt/nvme/aria2")
    return {"seconds": round(seconds, 1), "ok": ok, "tail": None if ok else proc.stdout[-300:] + proc.stderr[-300:]}


def _hf(node: Node, endpoint: str, sha: str) -> dict:
    # SSL_CERT_FILE: httpx trusts certifi's bundle, not the system's, unless told (hubtls.py)
    command = (f"HF_ENDPOINT={shlex.quote(endpoint)} HF_HUB_DISABLE_XET=1 HF_HUB_DISABLE_TELEMETRY=1 "
               "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt "
               f"HF_HOME=/mnt/nvme/hfbench hf download moonshotai/Kimi-K3 --revision {sha} "
               "--max-workers 16 --quiet")
    seconds, proc = node.run(command)
    ok = proc.returncode == 0
    node.run("rm -rf /mnt/nvme/hfbench")
    # xet: False says with the figure what makes it (the mock Hub speaks no Xet; the real Hub's
    # client would use Xet for a Xet-backed repo), so no reader takes it for the real Hub's.
    return {"seconds": round(seconds, 1), "ok": ok, "xet": False,
            "tail": None if ok else proc.stdout[-300:] + proc.stderr[-300:]}


def _k3deploy(tb: Path, node: Node, download: dict) -> dict:
    """One `k3deploy run resume-download` into an empty cache, with DOWNLOAD as the inventory's
    download section (beside the testbed's inventory, its key paths relative; its own state)."""
    node.run("rm -rf /mnt/nvme/hf /mnt/nvme/.k3deploy")
    n = len(list(tb.glob("inventory-*.yaml")))
    inv = tb / f"inventory-{n}.yaml"
    inv.write_text((tb / "inventory.yaml").read_text() + f"download: {json.dumps(download)}\n")
    began = time.monotonic()
    proc = _sh(PY, "-m", "k3deploy", "run", "resume-download", "-i", str(inv), check=False,
               env={**os.environ, "K3DEPLOY_STATE_DIR": str(tb / f"state-{n}")})
    whole = time.monotonic() - began
    text = node.run("cat /mnt/nvme/.k3deploy/download-progress.json")[1].stdout
    progress = json.loads(text) if text.strip() else {}
    replaced = node.run("grep -c 'replaced by a new one' /mnt/nvme/.k3deploy/download.log")[1].stdout.strip()
    node.run("rm -rf /mnt/nvme/hf")
    ok = proc.returncode == 0 and progress.get("state") == "done"
    return {"download": download, "ok": ok, "run_seconds": round(whole, 1),
            "seconds": round(progress["updated"] - progress["started"], 1) if progress else None,
            "hub_bytes": progress.get("hub_bytes"), "connections_replaced": int(replaced or 0),
            "tail": None if ok else (proc.stdout + proc.stderr)[-800:]}


# The real job's proportions (one node's Hub leg, 4x8 H100), and the scale this machine runs them
# at: rates / 54, so that a fast edge is 1/50 of the node's link (1/46 on the real one); time
# 1:1 (a 32 MiB range on a fast edge lasts ~0.5 s there, its scaled range here), so the
# downloader's own clocks (its 1 s measure of a range, timeouts) meet what they would meet.
REAL = {"link_Bps": 25e9 / 8, "fast_Bps": 67.6e6, "slow_Bps": 8.7e6, "slow_fraction": 0.7,
        "shard_bytes": 1.56e12 / 96, "segment_bytes": 32 << 20, "aria2c_piece": 20 << 20,
        "first_byte_ms": 17}
FAST_R = 1_250_000
RATIOS = {"shards": 16, "shard_bytes": 200_000_000, "fast_Bps": FAST_R, "slow_Bps": int(FAST_R * 8.7 / 67.6),
          "link_Bps": 50 * FAST_R, "slow_fraction": 0.7,
          "segment_mib": round(32 * FAST_R / REAL["fast_Bps"], 4), "aria2c_piece": "1M",  # aria2c's least
          "first_byte_ms": REAL["first_byte_ms"]}


def _ratios_flags(r: dict) -> list[str]:
    return ["--hub-cdn", "--hub-cdn-tls", "--hub-first-byte-ms", str(r["first_byte_ms"]),
            "--hub-rate", "0", "--hub-node-rate", str(r["link_Bps"]),
            "--hub-conn-rates", f"{r['slow_Bps']},{r['fast_Bps']},{r['slow_fraction']}",
            "--shards", str(r["shards"]), "--shard-bytes", str(r["shard_bytes"])]


def _proportions(r: dict) -> dict:
    """Each proportion here beside the real job's."""
    return {"fast_over_link": [round(r["fast_Bps"] / r["link_Bps"], 4), round(REAL["fast_Bps"] / REAL["link_Bps"], 4)],
            "segments_per_shard": [round(r["shard_bytes"] / (r["segment_mib"] * (1 << 20))),
                                   round(REAL["shard_bytes"] / REAL["segment_bytes"])],
            "aria2c_pieces_per_shard": [round(r["shard_bytes"] / (1 << 20)),
                                        round(REAL["shard_bytes"] / REAL["aria2c_piece"])],
            "fast_range_seconds": [round(r["segment_mib"] * (1 << 20) / r["fast_Bps"], 2),
                                   round(REAL["segment_bytes"] / REAL["fast_Bps"], 2)]}


def real_ratios(connections: list[int], with_hf: bool = True) -> dict:
    """One node at the real job's proportions over TLS: k3deploy at each connection count,
    aria2c, hf download; each against the link floor."""
    r = RATIOS
    disk = f"{int(r['shards'] * r['shard_bytes'] * 1.5 / 1e9) + 1}G"
    with tempfile.TemporaryDirectory(prefix="k3bench-cdn-") as tmp:
        tb = Path(tmp) / "tb"
        try:
            _sh(PY, "scripts/testbed", "up", "--dir", str(tb), "--nodes", "1", "--disk", disk, *_ratios_flags(r))
            node, endpoint = Node(tb), (tb / "hub" / "ready").read_text().strip()
            sha, files = _repo(endpoint)
            repo_bytes = sum(f["size"] for f in files)
            k3 = [_k3deploy(tb, node, {"peers": False, "connections": c, "segment_mib": r["segment_mib"]})
                  for c in connections]
            aria2 = _aria2(node, endpoint, sha, files, r["aria2c_piece"])
            hf = _hf(node, endpoint, sha) if with_hf else None
            cdn = json.loads(_sh(PY, "scripts/testbed", "stats", "--dir", str(tb), "--json").stdout)["cdn"]
        finally:
            _sh(PY, "scripts/testbed", "down", "--dir", str(tb), check=False)
    floor = repo_bytes / r["link_Bps"]
    over = lambda run: run["seconds"] and round(run["seconds"] / floor, 2)  # noqa: E731
    return {"bench": "real-ratios", "ratios": r, "proportions_here_and_real": _proportions(r),
            "repo_bytes": repo_bytes, "link_floor_s": round(floor, 1), "tls": True,
            "k3deploy": [{**k, "over_floor": over(k)} for k in k3],
            "aria2c": {**aria2, "over_floor": over(aria2)}, "hf_download": hf and {**hf, "over_floor": over(hf)},
            "cdn_authorized_requests": cdn["authorized_requests"]}


def fanout_with_lottery(nodes: int, hub_only_seconds: float) -> dict:
    import benchfanout
    # 2 MB shards: at 300 kB a shard is one range, and a whole shard on a slow edge is the
    # scaled-down test's artefact (a real shard is 16 GB, hundreds of ranges)
    return benchfanout.fanout(nodes, hub_only_seconds, extra=lambda rate: lottery_flags(rate),
                              shard_bytes=SHARD_BYTES)


def _say(doc: dict) -> str:
    if doc.get("bench") == "real-ratios":
        k3 = ", ".join(f"{k['download']['connections']} connections {k['seconds']}s ({k['over_floor']}x)"
                       for k in doc["k3deploy"])
        return (f"one node at the real proportions over TLS, {doc['repo_bytes'] / 1e6:.0f} MB, link floor "
                f"{doc['link_floor_s']}s: k3deploy {k3}; aria2c {doc['aria2c']['seconds']}s "
                f"({doc['aria2c']['over_floor']}x); hf download "
                + (f"{doc['hf_download']['seconds']}s ({doc['hf_download']['over_floor']}x)" if doc["hf_download"]
                   else "not run") + f"; CDN requests with a token: {doc['cdn_authorized_requests']}")
    return (f"{doc['nodes']} nodes, lottery on: weights-ready {doc['peers_s']}s with fan-out, "
            f"{doc['hub_only_s']}s Hub-only: {doc['ratio']}; Hub bytes / repo {doc['hub_over_repo_peers']}; "
            f"downloaders alone {doc['downloader_peers_s']}s / {doc['downloader_hub_only_s']}s: "
            f"{doc['downloader_ratio']}; Hub-only {doc['hub_only_over_link_floor']}x its link floor; "
            f"machine cores busy {doc['cores_busy_peers']} / {doc['cores_busy_hub_only']} of {doc['cores']}")


def main(fanout_nodes: list[int], hub_only_seconds: float, as_json: bool, single: bool = True,
         connections: tuple[int, ...] = (32, 64, 96), with_hf: bool = True) -> int:
    # Each figure as soon as it is measured: the whole run takes tens of minutes.
    runs = [lambda: real_ratios(list(connections), with_hf)] * int(single) + [
        lambda n=n: fanout_with_lottery(n, hub_only_seconds) for n in fanout_nodes]
    for measure in runs:
        doc = measure()
        print(json.dumps(doc) if as_json else _say(doc), flush=True)
    return 0

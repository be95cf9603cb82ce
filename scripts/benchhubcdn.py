"""scripts/bench --hub-cdn: the Hub leg through the mock Hub's CDN with its per-connection speed
lottery (`--hub-conn-rates SLOW,FAST,FRACTION`) under a node link (`--hub-node-rate`). Prints,
asserts nothing.

Per node (one testbed node, the same caps for all three, each into an empty directory):
  - k3deploy: `k3deploy run resume-download` (nvme + download); the time is the node-side
    downloader's own, first progress to done (its progress document), plus the whole run's;
  - aria2c -x16 -s16 -j16 (Debian's aria2) over the same /resolve URLs, with -k1M: aria2's
    default 20 MiB minimum piece would keep every scaled-down shard on one connection, where a
    real 16 GB shard gets its 16;
  - hf download --max-workers 16 with HF_HUB_DISABLE_XET=1 (huggingface_hub's plain HTTP path);
beside the link floor, the repo's bytes over --hub-node-rate. Then fan-out weights-ready against
Hub-only at 4 and 8 nodes (scripts/benchfanout.py) with the same lottery on: the ratio of the two
runs' wall times, and beside it the downloaders' own spans, Hub-only against its link floor and
the machine's busy cores. Every simulated node shares this machine's cores, so at 8 nodes both
runs are CPU-bound; and each run's fixed costs (SSH, the nvme step, uploads, the peer servers'
start, the last poll; ~4-9 s) stand in both, which a 1.56 TB download dwarfs
(`--fanout-hub-seconds` makes the repo's share larger).
"""
from __future__ import annotations

import json
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
LINK = 6_400_000               # the node's link: a 30 s floor for that repo
FAST = LINK // 8               # eight fast connections fill the link ...
SLOW = FAST // 8               # ... and a slow edge is 1:8 of a fast one (xet-core#821: 8.7 vs 68 MB/s)
FRACTION = 0.7


def _sh(*argv, check=True, **kw):
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, check=False, **kw)
    if check and proc.returncode != 0:
        sys.exit(f"{' '.join(map(str, argv))} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return proc


def lottery_flags(link: int = LINK) -> list[str]:
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


def _aria2(node: Node, endpoint: str, sha: str, files: list[dict]) -> dict:
    lines = [f"{endpoint}/moonshotai/Kimi-K3/resolve/{sha}/{f['path']}\n  out={f['path']}" for f in files]
    listing = "/mnt/nvme/aria2/urls.txt"
    node.run(f"mkdir -p /mnt/nvme/aria2 && cat > {listing} <<'EOF'\n" + "\n".join(lines) + "\nEOF")
    argv = ["aria2c", "-x16", "-s16", "-j16", "-k1M", "--file-allocation=none", "--console-log-level=warn",
            "--summary-interval=0", "-d", "/mnt/nvme/aria2", "-i", listing]
    seconds, proc = node.run(shlex.join(argv))
    ok = proc.returncode == 0
    node.run("rm -rf /mnt/nvme/aria2")
    return {"seconds": round(seconds, 1), "ok": ok, "tail": None if ok else proc.stdout[-300:] + proc.stderr[-300:]}


def _hf(node: Node, endpoint: str, sha: str) -> dict:
    command = (f"HF_ENDPOINT={shlex.quote(endpoint)} HF_HUB_DISABLE_XET=1 HF_HUB_DISABLE_TELEMETRY=1 "
               f"HF_HOME=/mnt/nvme/hfbench hf download moonshotai/Kimi-K3 --revision {sha} "
               "--max-workers 16 --quiet")
    seconds, proc = node.run(command)
    ok = proc.returncode == 0
    node.run("rm -rf /mnt/nvme/hfbench")
    return {"seconds": round(seconds, 1), "ok": ok, "tail": None if ok else proc.stdout[-300:] + proc.stderr[-300:]}


def _k3deploy(tb: Path, node: Node) -> dict:
    inv = tb / "inventory.yaml"
    began = time.monotonic()
    proc = _sh(PY, "-m", "k3deploy", "run", "resume-download", "-i", str(inv), check=False)
    whole = time.monotonic() - began
    progress = json.loads(node.run("cat /mnt/nvme/.k3deploy/download-progress.json")[1].stdout)
    replaced = node.run("grep -c 'replaced by a new one' /mnt/nvme/.k3deploy/download.log")[1].stdout.strip()
    return {"seconds": round(progress["updated"] - progress["started"], 1), "run_seconds": round(whole, 1),
            "ok": proc.returncode == 0, "hub_bytes": progress["hub_bytes"],
            "connections_replaced": int(replaced or 0),
            "tail": None if proc.returncode == 0 else proc.stdout[-500:]}


def single_node(shard_bytes: int = SHARD_BYTES, link: int = LINK) -> dict:
    with tempfile.TemporaryDirectory(prefix="k3bench-cdn-") as tmp:
        tb = Path(tmp) / "tb"
        try:
            _sh(PY, "scripts/testbed", "up", "--dir", str(tb), "--nodes", "1", "--disk", "2G",
                "--shard-bytes", str(shard_bytes), *lottery_flags(link))
            node = Node(tb)
            endpoint = (tb / "hub" / "ready").read_text().strip()
            sha, files = _repo(endpoint)
            repo_bytes = sum(f["size"] for f in files)
            k3 = _k3deploy(tb, node)
            aria2 = _aria2(node, endpoint, sha, files)
            hf = _hf(node, endpoint, sha)
            cdn = json.loads(_sh(PY, "scripts/testbed", "stats", "--dir", str(tb), "--json").stdout)["cdn"]
        finally:
            _sh(PY, "scripts/testbed", "down", "--dir", str(tb), check=False)
    floor = repo_bytes / link
    return {"repo_bytes": repo_bytes, "link_Bps": link, "conn_rates": f"{link // 64},{link // 8},{FRACTION}",
            "link_floor_s": round(floor, 1), "k3deploy": k3, "aria2c": aria2, "hf_download": hf,
            "k3deploy_over_floor": round(k3["seconds"] / floor, 2),
            "aria2c_over_floor": round(aria2["seconds"] / floor, 2),
            "hf_over_floor": round(hf["seconds"] / floor, 2),
            "k3deploy_hub_over_repo": round(k3["hub_bytes"] / repo_bytes, 3),
            "cdn_authorized_requests": cdn["authorized_requests"]}


def fanout_with_lottery(nodes: int, hub_only_seconds: float) -> dict:
    import benchfanout
    # 2 MB shards, as in single_node: at 300 kB a shard is one range, and a whole shard on a
    # slow edge is the scaled-down test's artefact (a real shard is 16 GB, hundreds of ranges)
    return benchfanout.fanout(nodes, hub_only_seconds, extra=lambda rate: lottery_flags(rate),
                              shard_bytes=SHARD_BYTES)


def _say(doc: dict) -> str:
    if "k3deploy" in doc:
        return (f"one node, {doc['repo_bytes'] / 1e6:.0f} MB over a {doc['link_Bps'] / 1e6:.1f} MB/s link "
                f"(floor {doc['link_floor_s']}s), connection lottery {doc['conn_rates']}: k3deploy "
                f"{doc['k3deploy']['seconds']}s ({doc['k3deploy_over_floor']}x floor), aria2c "
                f"{doc['aria2c']['seconds']}s ({doc['aria2c_over_floor']}x), hf download "
                f"{doc['hf_download']['seconds']}s ({doc['hf_over_floor']}x); CDN requests with a token: "
                f"{doc['cdn_authorized_requests']}")
    return (f"{doc['nodes']} nodes, lottery on: weights-ready {doc['peers_s']}s with fan-out, "
            f"{doc['hub_only_s']}s Hub-only: {doc['ratio']}; Hub bytes / repo {doc['hub_over_repo_peers']}; "
            f"downloaders alone {doc['downloader_peers_s']}s / {doc['downloader_hub_only_s']}s: "
            f"{doc['downloader_ratio']}; Hub-only {doc['hub_only_over_link_floor']}x its link floor; "
            f"machine cores busy {doc['cores_busy_peers']} / {doc['cores_busy_hub_only']} of {doc['cores']}")


def main(fanout_nodes: list[int], hub_only_seconds: float, as_json: bool, single: bool = True) -> int:
    # Each figure as soon as it is measured: the whole run takes tens of minutes.
    runs = [single_node] * int(single) + [lambda n=n: fanout_with_lottery(n, hub_only_seconds)
                                          for n in fanout_nodes]
    for measure in runs:
        doc = measure()
        print(json.dumps(doc) if as_json else _say(doc), flush=True)
    return 0

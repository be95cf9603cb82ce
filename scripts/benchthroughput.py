"""scripts/bench --throughput: the node downloader's data path at loopback speed, over TLS, against
curl, aria2c and this machine's floor. Prints, asserts nothing.

On 127.0.0.1, with no rate cap anywhere:
  - the CDN is nginx (the distribution's package, started here) serving the shards over TLS with a
    certificate made for this run; the mock Hub (scripts/tb/hub.py, in this process) answers
    `/resolve` with the Hub's 302 to a signed CDN URL, here pointing at nginx;
  - the Hub path: fetch_weights.py over that redirect into an empty cache, once per
    `--workers` count (the manifest's worker_processes);
  - the peer path: fetch_weights.py with a peers block against peer_server.py serving the same
    blobs (the owner), into an empty cache;
  - curl (-L through the redirect, into tee and sha256sum: 3 processes a file) and
    `aria2c -x16 -s16` (sha-256 checked by aria2) on the same URLs, every file at once;
  - the floor: sha256 of the same bytes, and writing them (8 MiB pieces: plain pwrite, and
    through the downloader's direct_io).
For each: MB/s (the repo's bytes over the process's wall time, start-up included), CPU-s per GB
of the client (its rusage, children included) and of the server (nginx's workers or the peer
server, from /proc), peak RSS; for k3deploy also its CPU-s per GB past start-up, and that over
the sha256 floor's. Then a projection for the 4x8 H100 job from the CPU-s/GB measured.
Everything lives in a temporary directory under --dir: /var/tmp (the default) is on a disk,
where the downloader's writes and read-backs go past the page cache as on a node's NVMe
(remote/direct_io.py); /dev/shm measures the data path into memory, which on a VM that hands
freed memory back to its host costs a host fault per new page.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REMOTE = REPO / "k3deploy" / "remote"
sys.path.insert(0, str(REPO / "scripts"))
from benchmeasure import Measured, children, floor  # noqa: E402
from benchproject import project  # noqa: E402
from benchserving import project_serving  # noqa: E402
from benchsave import usable_cores  # noqa: E402
from tb import hub as tbhub  # noqa: E402
from tb.hubcdn import BRIDGE, object_id  # noqa: E402

PY = sys.executable
SECRET = "bench-peer-secret-0123456789abcdef"
PEER_PORT = 18951


class Nginx:
    def __init__(self, root: Path, blobs: Path, repo_id: str):
        self.root = root
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", str(root / "key.pem"), "-out", str(root / "cert.pem")],
                       check=True, capture_output=True)
        self.cert, self.port = root / "cert.pem", _free_port()
        (root / "nginx.conf").write_text(f"""
user root; worker_processes {usable_cores()}; daemon off; pid {root}/nginx.pid;
error_log {root}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off; sendfile on; tcp_nopush on; keepalive_requests 100000; keepalive_timeout 60;
  client_body_temp_path {root}/tmp; proxy_temp_path {root}/tmp; fastcgi_temp_path {root}/tmp;
  uwsgi_temp_path {root}/tmp; scgi_temp_path {root}/tmp;
  server {{
    listen 127.0.0.1:{self.port} ssl; ssl_certificate {self.cert}; ssl_certificate_key {root}/key.pem;
    location /{BRIDGE}/{object_id(repo_id)}/ {{ alias {blobs}/; }}
  }}
}}
""")
        (root / "tmp").mkdir()
        self.proc = subprocess.Popen(["nginx", "-p", str(root), "-c", str(root / "nginx.conf")],
                                     stderr=subprocess.PIPE)
        self.url = f"https://127.0.0.1:{self.port}"
        _wait_port(self.port, self.proc)

    def workers(self) -> list[int]:
        return children(self.proc.pid)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait()


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, proc, host: str = "127.0.0.1") -> None:
    import socket
    for _ in range(200):
        if proc.poll() is not None:
            sys.exit(f"server exited {proc.returncode}: {proc.stderr.read().decode()[-1000:]}")
        try:
            socket.create_connection((host, port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"nothing listens on {host}:{port}")


def _files(repo) -> list[dict]:
    return [{"path": f.path, "size": f.size, "sha256": f.sha256, "oid": f.git_oid if not f.sha256 else None}
            for f in repo.files]


def _manifest(path: Path, repo, endpoint: str, workers: int, extra: dict | None = None,
              only_lfs: bool = False, head: int | None = None) -> Path:
    """With `head`: only the first `head` shards (and the small files, unless only_lfs)."""
    sys.path.insert(0, str(REMOTE))
    import protocol
    files = [f for f in _files(repo) if f["sha256"] or not only_lfs]
    if head is not None:
        shards = [f for f in files if f["sha256"]][:head]
        files = [f for f in files if not f["sha256"] or f in shards]
    doc = protocol.with_schema({"repo": repo.repo_id, "revision": "main", "sha": repo.sha, "endpoint": endpoint,
                                "max_workers": len(files), "worker_processes": workers, "files": files,
                                **(extra or {})})
    path.write_text(json.dumps(doc))
    return path


def _manifests(tmp: Path, name: str, repo, endpoint: str, workers: int, extra: dict | None = None,
               only_lfs: bool = False) -> dict:
    """The whole repo's manifest and its first shards' (one per worker), for _measure."""
    return {"full": _manifest(tmp / f"{name}.json", repo, endpoint, workers, extra, only_lfs),
            "head": _manifest(tmp / f"{name}-head.json", repo, endpoint, workers, extra, only_lfs, head=workers)}


def _bytes(manifest: Path) -> int:
    return sum(f["size"] for f in json.loads(manifest.read_text())["files"])


def _measure(manifests: dict, home: Path, servers, env=None) -> dict:
    """The whole repo's run and its figures, with the CPU per GB past start-up: the difference
    from a run over its first shards (one per worker), over the bytes between them. Start-up
    (the interpreter, /resolve, TLS handshakes, the tree) is in both; on a node's 390 GB it
    is nothing, on the bench's few GB a share of a CPU-second per GB."""
    full = Measured(_fetch(manifests["full"], home, env), servers(), env)
    used = _processes_used(home)
    head = Measured(_fetch(manifests["head"], home, env), servers(), env)
    nbytes, head_bytes = _bytes(manifests["full"]), _bytes(manifests["head"])
    per_gb = (full.cpu - head.cpu) / ((nbytes - head_bytes) / 1e9)
    return {"processes_used": used, **full.figures(nbytes), "cpu_s_per_GB_after_start": round(per_gb, 2),
            "start_cpu_s": round(head.cpu - per_gb * head_bytes / 1e9, 2)}


def _fetch(manifest: Path, home: Path, env: dict | None = None) -> list[str]:
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    return [PY, str(REMOTE / "fetch_weights.py"), "--manifest", str(manifest), "--hf-home", str(home / "hf"),
            "--progress", str(home / "progress.json")]


def hub_path(tmp: Path, repo, hub_url: str, nginx: Nginx, workers: list[int]) -> list[dict]:
    env = {**os.environ, "SSL_CERT_FILE": str(nginx.cert)}
    out = []
    for w in workers:
        out.append({"path": "hub-tls", "client": "k3deploy", "worker_processes": w,
                    **_measure(_manifests(tmp, f"hub-{w}", repo, hub_url, w), tmp / "dl", nginx.workers, env)})
        print(json.dumps(out[-1]), flush=True)
    shutil.rmtree(tmp / "dl", ignore_errors=True)
    return out


def _processes_used(home: Path) -> int:
    """The worker processes the downloader says it ran (its progress document; 1 if it does not say)."""
    return int(json.loads((home / "progress.json").read_text()).get("worker_processes", 1))


def peer_path(tmp: Path, repo, workers: list[int]) -> list[dict]:
    sys.path.insert(0, str(REMOTE))
    from fetch_cache import Ledger, RepoCache
    owner = tmp / "owner"
    cache = RepoCache(str(owner / "hf"), repo.repo_id)
    (tmp / "peer.secret").write_text(SECRET)
    os.chmod(tmp / "peer.secret", 0o600)
    lfs = [f for f in repo.files if f.sha256]
    for f in lfs:
        cache.blob(f.sha256).parent.mkdir(parents=True, exist_ok=True)
        os.link(repo.root / f.path, cache.blob(f.sha256))
        Ledger(cache.ledger).record(f.sha256, cache.blob(f.sha256))
    peers = {"self": "fetcher", "port": PEER_PORT, "secret_file": str(tmp / "peer.secret"),
             "nodes": {"owner": "127.0.0.2"}, "owner": {f.path: "owner" for f in lfs}}
    manifests = {w: _manifests(tmp, f"peer-{w}", repo, "http://127.0.0.1:9", w, {"peers": peers}, True)
                 for w in workers}
    server = subprocess.Popen([PY, str(REMOTE / "peer_server.py"), "--manifest", str(manifests[workers[0]]["full"]),
                               "--hf-home", str(owner / "hf"), "--listen", f"127.0.0.2:{PEER_PORT}",
                               "--secret-file", str(tmp / "peer.secret"), "--ready-file", str(tmp / "ready"),
                               "--served-log", str(tmp / "served.jsonl")],
                              stderr=subprocess.PIPE)
    out = []
    try:
        _wait_port(PEER_PORT, server, "127.0.0.2")
        for w in workers:
            out.append({"path": "peer", "client": "k3deploy", "worker_processes": w,
                        **_measure(manifests[w], tmp / "dl", lambda: [server.pid])})
            print(json.dumps(out[-1]), flush=True)
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(tmp / "dl", ignore_errors=True)
    return out


def _urls(repo, hub_url: str) -> list[tuple[str, str, str]]:
    return [(f"{hub_url}/{repo.repo_id}/resolve/{repo.sha}/{f.path}", f.path, f.sha256)
            for f in repo.files if f.sha256]


def curl(tmp: Path, repo, hub_url: str, nginx: Nginx, nbytes: int) -> dict:
    out = tmp / "curl"
    out.mkdir()
    lines = [f"curl -sSfL --cacert {nginx.cert} '{u}' | tee {out}/{i} | sha256sum > {out}/{i}.sha &"
             for i, (u, _, _) in enumerate(_urls(repo, hub_url))]
    m = Measured(["bash", "-c", "\n".join([*lines, "wait"])], nginx.workers())
    shutil.rmtree(out)
    return {"path": "hub-tls", "client": "curl | tee | sha256sum", **m.figures(nbytes)}


def aria2(tmp: Path, repo, hub_url: str, nginx: Nginx, nbytes: int) -> dict:
    out = tmp / "aria2"
    out.mkdir()
    listing = out / "urls.txt"
    listing.write_text("".join(f"{u}\n  out={p}\n  checksum=sha-256={s}\n" for u, p, s in _urls(repo, hub_url)))
    m = Measured(["aria2c", "-x16", "-s16", "-j16", "--file-allocation=none", "--console-log-level=warn",
                  "--summary-interval=0", f"--ca-certificate={nginx.cert}", "-d", str(out), "-i", str(listing)],
                 nginx.workers())
    shutil.rmtree(out)
    return {"path": "hub-tls", "client": "aria2c -x16 -s16", **m.figures(nbytes)}


# The tools the bench runs beside the downloader, and the Debian package of each: installed by
# the bench when missing (CI runs no bench, so scripts/setup does not install them).
TOOLS = {"nginx": "nginx-light", "aria2c": "aria2", "curl": "curl", "openssl": "openssl"}


def ensure_tools() -> None:
    missing = sorted({pkg for tool, pkg in TOOLS.items() if not shutil.which(tool)})
    if not missing:
        return
    print(json.dumps({"installing": missing}), file=sys.stderr, flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing]):
        proc = subprocess.run(argv, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"bench --throughput: {' '.join(argv)} exited {proc.returncode}:\n{proc.stderr[-1500:]}")
    still = [tool for tool in TOOLS if not shutil.which(tool)]
    if still:
        sys.exit(f"bench --throughput: {', '.join(still)} still missing after installing {', '.join(missing)}")


def main(files: int, size_mb: int, workers: list[int], directory: str, proj_args: dict) -> int:
    ensure_tools()
    with tempfile.TemporaryDirectory(prefix="k3bench-tp-", dir=directory) as tmpdir:
        tmp = Path(tmpdir)
        handle = tbhub.serve_in_thread(tmp / "hub", shards=files, shard_bytes=size_mb << 20,
                                       cdn_listen="127.0.0.1:0")
        blobs = tmp / "blobs"
        blobs.mkdir()
        for f in handle.repo.files:
            if f.sha256:
                os.symlink(handle.repo.root / f.path, blobs / f.sha256)
        nginx = Nginx(tmp, blobs, handle.repo.repo_id)
        handle.hub.cdn_url = nginx.url  # /resolve's 302 now points at nginx
        try:
            nbytes = sum(f.size for f in handle.repo.files)
            print(json.dumps({"files": files, "file_MB": size_mb, "repo_bytes": nbytes, "cores": usable_cores(),
                              "loadavg": [round(x, 2) for x in os.getloadavg()]}), flush=True)
            base = floor(tmp, handle.repo)
            print(json.dumps(base), flush=True)
            hub = hub_path(tmp, handle.repo, handle.url, nginx, workers)
            peer = peer_path(tmp, handle.repo, workers)
            for tool in (curl, aria2):
                print(json.dumps(tool(tmp, handle.repo, handle.url, nginx, nbytes)), flush=True)
        finally:
            nginx.stop()
            handle.stop()
    print(json.dumps(_scaling(hub, peer)), flush=True)
    print(json.dumps(_over_floor(base, hub, peer)), flush=True)
    parallel = hub[-1]["processes_used"] > 1 and peer[-1]["processes_used"] > 1
    serving_args = {k: proj_args.pop(k) for k in ("ranks_per_node", "node_ram_gb", "nvme_read_gbps", "rank_load_gbps")
                    if k in proj_args}
    weights = project(hub[-1], peer[-1], parallel=parallel, **proj_args)
    print(json.dumps(weights), flush=True)
    # The first launch after the download (cold cache, no kernels yet); a relaunch of the same
    # nodes (nothing to download, the page cache and the compile caches kept).
    print(json.dumps(project_serving(weights["weights_ready_minutes"], **serving_args)), flush=True)
    print(json.dumps(project_serving(0.0, warm=True, kernels_cached=True, **serving_args)), flush=True)
    return 0


def _scaling(hub: list[dict], peer: list[dict]) -> dict:
    def ratio(runs):
        return round(runs[-1]["MBps"] / runs[0]["MBps"], 2) if len(runs) > 1 else None
    return {"scaling": f"{hub[-1]['worker_processes']} worker processes over {hub[0]['worker_processes']}",
            "hub_tls_MBps_ratio": ratio(hub), "peer_MBps_ratio": ratio(peer)}


def _over_floor(base: dict, hub: list[dict], peer: list[dict]) -> dict:
    """Each k3deploy run's CPU per GB past start-up over sha256's alone in the same run: a
    ratio taken on one machine at one time, where a shared VM's absolute figures drift from
    run to run with its neighbours."""
    sha = base["sha256_cpu_s_per_GB"]
    return {"per_GB_over_sha256_floor": {f"{r['path']} {r['worker_processes']}w": round(
        r["cpu_s_per_GB_after_start"] / sha, 2) for r in (*hub, *peer)}}

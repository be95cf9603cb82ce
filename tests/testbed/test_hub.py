"""The testbed's mock Hub, exercised through the real huggingface_hub client (loopback only)."""
from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "scripts"))

from tb import hub as tbhub  # noqa: E402
from tb import hubrepo  # noqa: E402

SHARDS, SHARD_BYTES = 4, 50_000


@pytest.fixture
def hub(tmp_path):
    with tbhub.serve_in_thread(tmp_path / "hub", shards=SHARDS, shard_bytes=SHARD_BYTES) as handle:
        yield handle


def git_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def get(url: str, headers: dict | None = None) -> tuple[int, dict, bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def node_stats(handle, node="127.0.0.1") -> dict:
    return handle.stats()["by_node"][node]


def test_repo_is_deterministic_real_safetensors(tmp_path):
    a = hubrepo.build_repo(tmp_path / "a", shards=3, shard_bytes=10_000)
    b = hubrepo.build_repo(tmp_path / "b", shards=3, shard_bytes=10_000)
    assert a.sha == b.sha and len(a.sha) == 40 and a.files == b.files
    assert hubrepo.build_repo(tmp_path / "c", shards=3, shard_bytes=10_001).sha != a.sha
    index = json.loads(a.local_path("model.safetensors.index.json").read_bytes())
    assert sorted(set(index["weight_map"].values())) == a.shard_names() and len(a.shard_names()) == 3
    data_total = 0
    for name in a.shard_names():
        body = a.local_path(name).read_bytes()
        hlen = int.from_bytes(body[:8], "little")
        header = json.loads(body[8:8 + hlen])
        (tensor,) = [v for k, v in header.items() if k != "__metadata__"]
        assert len(body) == 10_000 == 8 + hlen + tensor["data_offsets"][1]
        data_total += tensor["data_offsets"][1]
        f = a.file(name)
        assert f.is_lfs and f.sha256 == hashlib.sha256(body).hexdigest() == f.etag
        assert f.git_oid == git_sha1(hubrepo.lfs_pointer(f.sha256, f.size))
    assert index["metadata"]["total_size"] == data_total
    for name in ("config.json", "generation_config.json", "tokenizer_config.json", "tiktoken.model", "README.md"):
        f = a.file(name)
        assert not f.is_lfs and f.etag == git_sha1(a.local_path(name).read_bytes())


def test_snapshot_download_and_verify_with_real_client(hub, hf, tmp_path):
    cache = tmp_path / "cache"
    path = Path(hf.snapshot_download(hub.repo.repo_id, cache_dir=cache, endpoint=hub.url, token=False))
    assert path.name == hub.repo.sha
    for f in hub.repo.files:
        data = (path / f.path).read_bytes()
        assert len(data) == f.size
        assert (hashlib.sha256(data).hexdigest() if f.is_lfs else git_sha1(data)) == f.etag
    storage = cache / "models--moonshotai--Kimi-K3"
    assert (storage / "refs" / "main").read_text() == hub.repo.sha
    api = hf.HfApi(endpoint=hub.url, token=False)
    result = api.verify_repo_checksums(hub.repo.repo_id, revision=hub.repo.sha, cache_dir=cache)
    assert (result.checked_count, result.mismatches, result.missing_paths) == (len(hub.repo.files), [], [])
    stats = node_stats(hub)
    assert stats["bytes"] == hub.repo.total_bytes
    assert all(stats["files"][f.path] == {"bytes": f.size, "gets": 1} for f in hub.repo.files)


def test_metadata_endpoints(hub, hf):
    api = hf.HfApi(endpoint=hub.url, token=False)
    info = api.model_info(hub.repo.repo_id, revision="main", files_metadata=True)
    assert info.sha == hub.repo.sha
    by_name = {s.rfilename: s for s in info.siblings}
    assert set(by_name) == {f.path for f in hub.repo.files}
    for f in hub.repo.files:
        assert by_name[f.path].size == f.size
        assert (by_name[f.path].lfs.sha256 if f.is_lfs else by_name[f.path].lfs) == f.sha256
    assert api.model_info(hub.repo.repo_id, revision=hub.repo.sha).sha == hub.repo.sha
    tree = {e.path: e for e in api.list_repo_tree(hub.repo.repo_id, recursive=True, revision="main")}
    assert {p: (e.size, e.blob_id) for p, e in tree.items()} == {f.path: (f.size, f.git_oid) for f in hub.repo.files}
    shard = hub.repo.file(hub.repo.shard_names()[0])
    meta = hf.get_hf_file_metadata(hf.hf_hub_url(hub.repo.repo_id, shard.path, endpoint=hub.url), token=False)
    assert (meta.etag, meta.size, meta.commit_hash) == (shard.sha256, shard.size, hub.repo.sha)
    assert meta.xet_file_data is None
    small = hub.repo.file("config.json")
    meta = hf.get_hf_file_metadata(hf.hf_hub_url(hub.repo.repo_id, small.path, endpoint=hub.url), token=False)
    assert (meta.etag, meta.size) == (small.git_oid, small.size)


def test_errors_map_to_client_exceptions(hub, hf, tmp_path):
    from huggingface_hub import errors
    kwargs = {"cache_dir": tmp_path, "endpoint": hub.url, "token": False}
    with pytest.raises(errors.RemoteEntryNotFoundError):
        hf.hf_hub_download(hub.repo.repo_id, "nope.bin", **kwargs)
    with pytest.raises(errors.RevisionNotFoundError):
        hf.hf_hub_download(hub.repo.repo_id, "config.json", revision="v9", **kwargs)
    with pytest.raises(errors.RepositoryNotFoundError):
        hf.HfApi(endpoint=hub.url, token=False).model_info("someone/else")
    status, headers, _ = get(f"{hub.url}/api/agent-harnesses")
    assert status == 404
    status, headers, _ = get(f"{hub.url}/{hub.repo.repo_id}/resolve/main/nope.bin")
    assert (status, headers["X-Error-Code"], headers["X-Repo-Commit"]) == (404, "EntryNotFound", hub.repo.sha)


def test_range_requests(hub):
    shard = hub.repo.file(hub.repo.shard_names()[1])
    body = hub.repo.local_path(shard.path).read_bytes()
    url = f"{hub.url}/{hub.repo.repo_id}/resolve/{hub.repo.sha}/{shard.path}"
    status, headers, data = get(url, {"Range": "bytes=1000-"})
    assert (status, data) == (206, body[1000:])
    assert headers["Content-Range"] == f"bytes 1000-{shard.size - 1}/{shard.size}"
    assert headers["Accept-Ranges"] == "bytes" and headers["X-Linked-Size"] == str(shard.size)
    status, headers, data = get(url, {"Range": "bytes=10-19"})
    assert (status, data) == (206, body[10:20])
    status, headers, _ = get(url, {"Range": f"bytes={shard.size}-"})
    assert (status, headers["Content-Range"]) == (416, f"bytes */{shard.size}")
    status, headers, data = get(url)
    assert (status, data, headers["ETag"]) == (200, body, f'"{shard.sha256}"')


def test_token_gates_the_repo_and_is_counted(tmp_path, hf):
    from huggingface_hub import errors
    with tbhub.serve_in_thread(tmp_path / "hub", shards=1, shard_bytes=2000, token="hf_sekrit") as gated:
        with pytest.raises(errors.GatedRepoError):
            hf.snapshot_download(gated.repo.repo_id, cache_dir=tmp_path / "c1", endpoint=gated.url, token=False)
        anonymous = node_stats(gated)
        assert anonymous["authorized_requests"] == 0 and anonymous["bytes"] == 0
        status, _, _ = get(f"{gated.url}/api/models/{gated.repo.repo_id}", {"Authorization": "Bearer wrong"})
        assert status == 401
        path = hf.snapshot_download(gated.repo.repo_id, cache_dir=tmp_path / "c2", endpoint=gated.url,
                                    token="hf_sekrit")
        assert sorted(p.name for p in Path(path).iterdir()) == sorted(f.path for f in gated.repo.files)
        after = node_stats(gated)
        with_token = after["requests"] - anonymous["requests"]
        assert with_token > len(gated.repo.files) and after["authorized_requests"] == with_token
        assert after["bytes"] == gated.repo.total_bytes


def test_drop_after_cuts_bodies_and_the_client_resumes(tmp_path, hf):
    """huggingface_hub 2.4 writes in DOWNLOAD_CHUNK_SIZE (10 MiB) pieces and loses the unwritten rest
    of a cut body, so it only makes progress when the cut comes after at least one whole piece."""
    from huggingface_hub import constants
    piece = constants.DOWNLOAD_CHUNK_SIZE
    size, cut = 2 * piece + piece // 2, piece + piece // 5
    with tbhub.serve_in_thread(tmp_path / "hub", shards=1, shard_bytes=size) as hub:
        shard = hub.repo.file(hub.repo.shard_names()[0])
        tbhub.write_fault(hub.dir, "drop-after", cut)
        assert json.loads((hub.dir / "faults.json").read_text()) == {"drop_after": cut}
        path = hf.hf_hub_download(hub.repo.repo_id, shard.path, cache_dir=tmp_path, endpoint=hub.url, token=False)
        assert hashlib.sha256(Path(path).read_bytes()).hexdigest() == shard.sha256
        served = node_stats(hub)["files"][shard.path]
        # 0..cut (keeps one piece), piece..piece+cut (keeps one more), 2*piece..end: ranged resumes
        assert served == {"bytes": cut + cut + (size - 2 * piece), "gets": 3}
        tbhub.write_fault(hub.dir, "heal")
        assert not json.loads((hub.dir / "faults.json").read_text())
        assert len(get(f"{hub.url}/{hub.repo.repo_id}/resolve/main/{shard.path}")[2]) == size


def test_corrupt_serves_wrong_bytes_of_the_same_length(hub):
    shard = hub.repo.file(hub.repo.shard_names()[2])
    url = f"{hub.url}/{hub.repo.repo_id}/resolve/main/{shard.path}"
    good = hub.repo.local_path(shard.path).read_bytes()
    tbhub.write_fault(hub.dir, "corrupt", shard.path)
    status, headers, bad = get(url)
    assert status == 200 and len(bad) == shard.size and headers["ETag"] == f'"{shard.sha256}"'
    header_end = 8 + int.from_bytes(good[:8], "little")
    assert bad != good and bad[:header_end] == good[:header_end]  # still parses as safetensors
    assert get(url, {"Range": "bytes=30000-"})[2] == bad[30000:]  # corruption is stable across ranges
    config = hub.repo.local_path("config.json").read_bytes()
    assert get(f"{hub.url}/{hub.repo.repo_id}/resolve/main/config.json")[2] == config
    tbhub.write_fault(hub.dir, "heal")
    assert get(url)[2] == good


def test_stats_file_shape_and_node_names(hub):
    (hub.dir / "nodes.json").write_text(json.dumps({"127.0.0.1": "node0"}))
    get(f"{hub.url}/{hub.repo.repo_id}/resolve/main/config.json")
    get(f"{hub.url}/{hub.repo.repo_id}/resolve/main/config.json", {"Range": "bytes=100-"})
    deadline = time.time() + 5
    while time.time() < deadline:  # the file is flushed by the server itself, without our help
        doc = json.loads((hub.dir / "stats.json").read_text())
        if doc["by_node"].get("node0", {}).get("requests") == 2:
            break
        time.sleep(0.05)
    size = hub.repo.file("config.json").size
    assert doc["repo"] == hub.repo.repo_id and doc["repo_bytes"] == hub.repo.total_bytes
    assert doc["by_node"]["node0"] == {"bytes": size + size - 100, "requests": 2, "authorized_requests": 0,
                                       "files": {"config.json": {"bytes": 2 * size - 100, "gets": 2}}}
    assert (hub.dir / "ready").read_text().strip() == hub.url


def test_rate_limits_each_connection(tmp_path):
    with tbhub.serve_in_thread(tmp_path / "hub", shards=1, shard_bytes=60_000, rate=100_000) as slow:
        shard = slow.repo.shard_names()[0]
        started = time.monotonic()
        status, _, data = get(f"{slow.url}/{slow.repo.repo_id}/resolve/main/{shard}")
        elapsed = time.monotonic() - started
    # 60 kB at 100 kB/s: 0.6 s. The lower bound is the limit; the upper one only catches a
    # limiter ten times too slow (6 s), with room for a loaded machine.
    assert status == 200 and len(data) == 60_000 and 0.5 <= elapsed < 6


def test_node_rate_is_shared_by_all_connections_of_a_node(tmp_path):
    # Four parallel 60 kB bodies to one client at 100 kB/s per node: about 2.4 s together (2.0
    # allows for each body's last chunk going out before its charge), where one 100 kB/s limit
    # per connection would let them finish in 0.6 s.
    from concurrent.futures import ThreadPoolExecutor
    with tbhub.serve_in_thread(tmp_path / "hub", shards=4, shard_bytes=60_000, node_rate=100_000) as slow:
        urls = [f"{slow.url}/{slow.repo.repo_id}/resolve/main/{s}" for s in slow.repo.shard_names()]
        started = time.monotonic()
        with ThreadPoolExecutor(4) as pool:
            bodies = [r[2] for r in pool.map(get, urls)]
        elapsed = time.monotonic() - started
    assert [len(b) for b in bodies] == [60_000] * 4 and elapsed >= 2.0, elapsed


def test_cli_runs_on_stdlib_python_and_exits_on_sigterm(tmp_path):
    hub_dir, token_file = tmp_path / "hub", tmp_path / "token"
    token_file.write_text("hf_cli_token\n")
    argv = ["/usr/bin/python3", str(REPO_ROOT / "scripts/tb/hub.py"), "serve", "--dir", str(hub_dir),
            "--listen", "127.0.0.1:0", "--repo", "moonshotai/Kimi-K3", "--shards", "2", "--shard-bytes", "4096",
            "--rate", "0", "--token-file", str(token_file)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 20
        while not (hub_dir / "ready").exists() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        url = (hub_dir / "ready").read_text().strip()
        status, _, body = get(f"{url}/api/models/moonshotai/Kimi-K3/revision/main",
                              {"Authorization": "Bearer hf_cli_token"})
        assert status == 200 and len(json.loads(body)["siblings"]) == 2 + 6
        assert get(f"{url}/api/models/moonshotai/Kimi-K3/revision/main")[0] == 401
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not (hub_dir / "ready").exists()
    stats = json.loads((hub_dir / "stats.json").read_text())["by_node"]["127.0.0.1"]
    assert (stats["requests"], stats["authorized_requests"]) == (2, 1)

"""k3deploy/remote/fetch_weights.py against the in-process mock Hub on loopback (no root needed).

The downloader runs as a subprocess, as on a node, so SIGKILL and fresh imports are real.
"""
from __future__ import annotations

import fcntl
import hashlib
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

from tb import hub as tbhub  # noqa: E402
from k3deploy.remote import bundled, protocol  # noqa: E402
from polling import wait_until  # noqa: E402

SCRIPT = REPO_ROOT / "k3deploy" / "remote" / "fetch_weights.py"
STORAGE = "hub/models--moonshotai--Kimi-K3"


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(extra)
    return env


def write_manifest(path: Path, hub, max_workers=4) -> Path:
    files = [{"path": f.path, "size": f.size, "sha256": f.sha256, "oid": None if f.is_lfs else f.git_oid}
             for f in hub.repo.files]
    doc = protocol.with_schema({"repo": hub.repo.repo_id, "revision": "main", "sha": hub.repo.sha,
                                "endpoint": hub.url, "max_workers": max_workers, "files": files})
    path.write_text(json.dumps(doc))
    return path


class Node:
    """One simulated node's paths: HF_HOME, manifest, progress, log."""

    def __init__(self, root: Path, hub, max_workers=4):
        self.root, self.hub = root, hub
        root.mkdir(parents=True, exist_ok=True)
        self.hf_home, self.progress = root / "hf", root / "progress.json"
        self.manifest = write_manifest(root / "manifest.json", hub, max_workers)
        self.storage = self.hf_home / STORAGE

    def argv(self, env_file: Path | None = None) -> list[str]:
        argv = [sys.executable, str(SCRIPT), "--manifest", str(self.manifest), "--hf-home", str(self.hf_home),
                "--progress", str(self.progress)]
        return argv + (["--env-file", str(env_file)] if env_file else [])

    def run(self, env_file: Path | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(env_file), env=clean_env(), capture_output=True, text=True, timeout=120)

    def start(self) -> subprocess.Popen:
        return subprocess.Popen(self.argv(), env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def read_progress(self) -> dict:
        return json.loads(self.progress.read_text())

    def blob(self, f) -> Path:
        return self.storage / "blobs" / f.etag

    def leftovers(self) -> list[str]:
        return sorted(p.name for p in (self.storage / "blobs").iterdir() if p.name.endswith(".incomplete"))


@pytest.fixture
def hub(tmp_path):
    with tbhub.serve_in_thread(tmp_path / "hub", shards=4, shard_bytes=60_000) as handle:
        yield handle


def served(hub) -> dict:
    return hub.stats()["by_node"].get("127.0.0.1", {"files": {}, "requests": 0, "authorized_requests": 0})


def hub_done(hub) -> None:
    """Wait until the hub has ended every connection of a killed or stopped downloader: only
    then does `served` count all the bytes it sent to it."""
    wait_until(lambda: hub.answering() == 0, 10, "the hub to end the dead client's connections")


def gets_and_bytes(stats: dict, path: str) -> tuple[int, int]:
    entry = stats["files"].get(path, {"gets": 0, "bytes": 0})
    return entry["gets"], entry["bytes"]


def python_with_hf(code: str, hf_home: Path, **env) -> subprocess.CompletedProcess:
    """Run code in a fresh interpreter (huggingface_hub reads HF_HOME/HF_HUB_OFFLINE at import)."""
    return subprocess.run([sys.executable, "-c", code], env=clean_env(HF_HOME=str(hf_home), **env),
                          capture_output=True, text=True, timeout=60)


def test_full_run_writes_a_normal_hf_cache(hub, tmp_path):
    node = Node(tmp_path / "node", hub)
    result = node.run()
    assert result.returncode == 0, result.stdout + result.stderr
    progress = node.read_progress()
    total = hub.repo.total_bytes
    assert progress | {"pid": 0, "updated": 0, "started": 0, "rate_bps": 0} == {
        "schema": protocol.SCHEMA_VERSION,
        "pid": 0, "state": "done", "error": None, "bytes_total": total, "bytes_done": total, "rate_bps": 0,
        "files_total": len(hub.repo.files), "files_done": len(hub.repo.files), "shards_total": 4,
        "shards_done": 4, "started": 0, "updated": 0,
        "hub_bytes": total, "peer_bytes": 0, "peer_bytes_by": {}, "bad_peers": []}
    snapshot = node.storage / "snapshots" / hub.repo.sha
    for f in hub.repo.files:
        link = snapshot / f.path
        assert os.readlink(link) == f"../../blobs/{f.etag}"
        assert link.read_bytes() == hub.repo.local_path(f.path).read_bytes()
    assert (node.storage / "refs" / "main").read_text() == hub.repo.sha
    assert node.leftovers() == []
    assert served(hub)["bytes"] == total

    # the real client sees a complete cache offline, and notices a missing file from our trees/ file
    offline = ("from huggingface_hub import snapshot_download; "
               f"print(snapshot_download({hub.repo.repo_id!r}, revision={hub.repo.sha!r}))")
    check = python_with_hf(offline, node.hf_home, HF_HUB_OFFLINE="1")
    assert check.returncode == 0 and check.stdout.strip() == str(snapshot), check.stderr
    verify = (f"from huggingface_hub import HfApi; r = HfApi(endpoint={hub.url!r}).verify_repo_checksums("
              f"{hub.repo.repo_id!r}, revision='main', cache_dir={str(node.hf_home / 'hub')!r}); "
              "print(r.checked_count, len(r.mismatches), len(r.missing_paths))")
    check = python_with_hf(verify, node.hf_home, HF_HUB_DISABLE_TELEMETRY="1")
    assert check.stdout.split() == [str(len(hub.repo.files)), "0", "0"], check.stderr
    hf_cli = [str(Path(sys.executable).parent / "hf"), "cache", "verify", hub.repo.repo_id, "--revision", "main",
              "--fail-on-missing-files", "--fail-on-extra-files", "--format", "json"]
    cli_env = clean_env(HF_HOME=str(node.hf_home), HF_ENDPOINT=hub.url, HF_HUB_DISABLE_UPDATE_CHECK="1")  # no pypi.org
    cli = subprocess.run(hf_cli, capture_output=True, text=True, timeout=60, env=cli_env)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    shard_blob = node.blob(hub.repo.file(hub.repo.shard_names()[0]))
    good = shard_blob.read_bytes()
    shard_blob.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    assert subprocess.run(hf_cli, capture_output=True, env=cli_env).returncode != 0  # the check can fail
    shard_blob.write_bytes(good)
    (snapshot / "config.json").unlink()
    check = python_with_hf(offline, node.hf_home, HF_HUB_OFFLINE="1")
    # (2.4 raises LocalEntryNotFoundError for the missing file; without trees/<sha>.json it would
    # silently return the incomplete folder)
    assert check.returncode != 0 and "config.json" in check.stderr and "LocalEntryNotFoundError" in check.stderr
    local_only = offline.replace("))", ", local_files_only=True))")
    check = python_with_hf(local_only, node.hf_home)
    assert check.returncode != 0 and "IncompleteSnapshotError" in check.stderr and "config.json" in check.stderr


def test_trees_file_matches_what_huggingface_hub_writes(hub, tmp_path):
    node = Node(tmp_path / "node", hub)
    assert node.run().returncode == 0
    real = python_with_hf(f"from huggingface_hub import snapshot_download; snapshot_download("
                          f"{hub.repo.repo_id!r}, endpoint={hub.url!r}, token=False)",
                          tmp_path / "real", HF_HUB_DISABLE_TELEMETRY="1")
    assert real.returncode == 0, real.stderr
    tree = f"trees/{hub.repo.sha}.json"
    ours = json.loads((node.storage / tree).read_text())
    theirs = json.loads((tmp_path / "real" / STORAGE / tree).read_text())
    assert ours == theirs


def test_rerun_skips_verified_files_and_cleans_orphans(hub, tmp_path):
    node = Node(tmp_path / "node", hub)
    assert node.run().returncode == 0
    before = served(hub)
    shard = hub.repo.file(hub.repo.shard_names()[0])
    orphan = node.storage / "blobs" / f"{shard.etag}.0badc0de.incomplete"
    orphan.write_bytes(b"x" * 100)
    result = node.run()
    assert result.returncode == 0, result.stderr
    after = served(hub)
    assert after["files"] == before["files"]  # not one file body fetched again
    assert "hashed" not in result.stdout  # the ledger vouched for every blob, nothing re-hashed
    assert node.leftovers() == []
    assert node.read_progress()["files_done"] == len(hub.repo.files)


def test_sigkill_mid_download_then_rerun_resumes(tmp_path):
    with tbhub.serve_in_thread(tmp_path / "hub", shards=6, shard_bytes=200_000, rate=250_000) as slow:
        node = Node(tmp_path / "node", slow, max_workers=3)
        shards = [slow.repo.file(n) for n in slow.repo.shard_names()]
        proc = node.start()
        try:
            seen_running = wait_for_verified_and_partial(node, shards, proc)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        assert seen_running["state"] == "running" and seen_running["pid"] == proc.pid
        assert 0 < seen_running["bytes_done"] < slow.repo.total_bytes
        hub_done(slow)
        verified = {f.path for f in slow.repo.files if node.blob(f).exists()}
        partial = {f.path: (node.storage / "blobs" / f"{f.etag}.incomplete").stat().st_size
                   for f in shards if (node.storage / "blobs" / f"{f.etag}.incomplete").exists()}
        assert any(p in verified for p in slow.repo.shard_names()) and any(partial.values())
        first = served(slow)

        result = node.run()
        assert result.returncode == 0, result.stdout + result.stderr
        second = served(slow)
    for f in slow.repo.files:
        gets0, bytes0 = gets_and_bytes(first, f.path)
        gets1, bytes1 = gets_and_bytes(second, f.path)
        if f.path in verified:
            assert gets1 == gets0, f"{f.path} was verified before the kill yet fetched again"
        elif f.path in partial:
            assert (gets1 - gets0, bytes1 - bytes0) == (1, f.size - partial[f.path]), f.path
            # what the hub sent beyond the file's size is only what was in flight at the kill
            assert bytes1 - f.size <= 64 * 1024, f"{f.path}: {bytes1 - f.size} bytes served twice"
        else:
            assert (gets1 - gets0, bytes1 - bytes0) == (1, f.size), f.path
    assert node.read_progress()["state"] == "done" and node.leftovers() == []


def wait_for_verified_and_partial(node: Node, shards, proc) -> dict:
    """Wait until at least one shard is verified and another is partly on disk; return a progress doc."""
    deadline, last_progress = time.time() + 30, {}
    while time.time() < deadline and proc.poll() is None:
        if node.progress.exists():
            last_progress = node.read_progress()
        done = [f for f in shards if node.blob(f).exists()]
        parts = [node.storage / "blobs" / f"{f.etag}.incomplete" for f in shards]
        half = [p for p in parts if p.exists() and p.stat().st_size >= 50_000]
        if done and half and last_progress.get("bytes_done"):
            return last_progress
        time.sleep(0.02)
    raise AssertionError(f"never saw a verified and a partial shard (exit {proc.poll()}, {last_progress})")


def test_adopts_the_orphan_a_killed_huggingface_hub_left(tmp_path):
    with tbhub.serve_in_thread(tmp_path / "hub", shards=2, shard_bytes=300_000, rate=150_000) as slow:
        node = Node(tmp_path / "node", slow)
        shard = slow.repo.file(slow.repo.shard_names()[0])
        # the real client, with a smaller write piece (its default 10 MiB exceeds these test shards)
        code = ("import huggingface_hub.constants as c; c.DOWNLOAD_CHUNK_SIZE = 16384; "
                "from huggingface_hub import hf_hub_download; "
                f"hf_hub_download({slow.repo.repo_id!r}, {shard.path!r}, endpoint={slow.url!r}, token=False)")
        proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.DEVNULL,
                                env=clean_env(HF_HOME=str(node.hf_home), HF_HUB_DISABLE_TELEMETRY="1"))
        try:
            orphan = wait_for_orphan(node, shard, proc)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        hub_done(slow)
        kept = orphan.stat().st_size
        before = served(slow)
        result = node.run()
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"adopting huggingface_hub partial {orphan.name}" in result.stdout
        gets0, bytes0 = gets_and_bytes(before, shard.path)
        gets1, bytes1 = gets_and_bytes(served(slow), shard.path)
    assert (gets1 - gets0, bytes1 - bytes0) == (1, shard.size - kept)
    assert hashlib.sha256(node.blob(shard).read_bytes()).hexdigest() == shard.sha256
    assert node.leftovers() == []


def wait_for_orphan(node: Node, shard, proc) -> Path:
    deadline = time.time() + 30
    while time.time() < deadline and proc.poll() is None:
        found = list((node.storage / "blobs").glob(f"{shard.etag}.*.incomplete")) if node.storage.exists() else []
        if found and found[0].stat().st_size >= 60_000:
            return found[0]
        time.sleep(0.02)
    raise AssertionError(f"huggingface_hub left no partial file (exit {proc.poll()})")


def test_bad_partial_and_bad_blob_are_refetched(hub, tmp_path):
    node = Node(tmp_path / "node", hub)
    bad_partial, bad_blob = (hub.repo.file(n) for n in hub.repo.shard_names()[:2])
    blobs = node.storage / "blobs"
    blobs.mkdir(parents=True)
    (blobs / f"{bad_partial.etag}.incomplete").write_bytes(b"\0" * bad_partial.size)
    (blobs / bad_blob.etag).write_bytes(b"\1" * bad_blob.size)
    result = node.run()
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{bad_partial.path}: sha256 mismatch (attempt 1/3)" in result.stdout
    assert f"{bad_blob.path}: existing blob fails verification" in result.stdout
    stats = served(hub)
    for f in (bad_partial, bad_blob):
        assert gets_and_bytes(stats, f.path) == (1, f.size)
        assert hashlib.sha256(node.blob(f).read_bytes()).hexdigest() == f.sha256


def test_corrupt_hub_file_fails_naming_it_then_heals(hub, tmp_path):
    node = Node(tmp_path / "node", hub)
    bad = hub.repo.shard_names()[1]
    tbhub.write_fault(hub.dir, "corrupt", bad)
    result = node.run()
    assert result.returncode == 1
    last_line = result.stderr.strip().splitlines()[-1]
    assert bad in last_line and "sha256 mismatch after 3 downloads" in last_line
    progress = node.read_progress()
    assert progress["state"] == "failed" and bad in progress["error"]
    assert progress["files_done"] == len(hub.repo.files) - 1
    assert gets_and_bytes(served(hub), bad)[0] == 3
    assert not node.blob(hub.repo.file(bad)).exists()

    tbhub.write_fault(hub.dir, "heal")
    before = served(hub)
    assert node.run().returncode == 0
    after = served(hub)
    changed = {p for p in after["files"] if after["files"][p] != before["files"].get(p)}
    assert changed == {bad} and node.read_progress()["state"] == "done"


def test_dropped_connections_resume_within_a_run(hub, tmp_path):
    tbhub.write_fault(hub.dir, "drop-after", 25_000)
    node = Node(tmp_path / "node", hub)
    result = node.run()
    assert result.returncode == 0, result.stdout + result.stderr
    stats = served(hub)
    for name in hub.repo.shard_names():
        assert gets_and_bytes(stats, name) == (3, 60_000)  # 25k + 25k + 10k, nothing fetched twice


def test_token_comes_from_the_env_file_and_is_never_printed(tmp_path):
    token = "hf_node_secret_123"
    with tbhub.serve_in_thread(tmp_path / "hub", shards=1, shard_bytes=4096, token=token) as gated:
        node = Node(tmp_path / "node", gated)
        denied = node.run()
        assert denied.returncode == 1 and "401" in denied.stderr.strip().splitlines()[-1]
        env_file = tmp_path / "hf.env"
        env_file.write_text(f"HF_TOKEN={token}\n")
        env_file.chmod(0o600)
        before = served(gated)
        result = node.run(env_file)
        assert result.returncode == 0, result.stdout + result.stderr
        after = served(gated)
    requests = after["requests"] - before["requests"]
    authorized = after["authorized_requests"] - before["authorized_requests"]
    assert authorized == len(gated.repo.files)  # one GET per file, each with the token
    assert requests - authorized <= 1  # the library's agent-registry probe goes without it
    for text in (result.stdout, result.stderr, denied.stdout, denied.stderr, node.progress.read_text()):
        assert token not in text


def test_a_manifest_of_another_schema_version_is_refused_naming_both(hub, tmp_path):
    node = Node(tmp_path / "node", hub)
    doc = json.loads(node.manifest.read_text())
    node.manifest.write_text(json.dumps({**doc, "schema": protocol.SCHEMA_VERSION + 1}))
    result = node.run()
    assert result.returncode == 2
    assert (f"schema version {protocol.SCHEMA_VERSION + 1} but this node program speaks version "
            f"{protocol.SCHEMA_VERSION}") in result.stderr
    assert not list((node.hf_home / "hub").glob("models--*/blobs/*"))   # nothing fetched
    # weights_status, bundled with the protocol for `python3 -c`, refuses it the same way
    status = subprocess.run([sys.executable, "-c", bundled("weights_status.py"), str(node.hf_home),
                             str(tmp_path / "none.json"), str(tmp_path / "none.pid")],
                            input=node.manifest.read_text(), capture_output=True, text=True)
    assert status.returncode == 1 and "speaks version" in status.stderr
    status = subprocess.run([sys.executable, "-c", bundled("weights_status.py"), str(node.hf_home),
                             str(tmp_path / "none.json"), str(tmp_path / "none.pid")],
                            input=json.dumps(doc), capture_output=True, text=True)
    assert status.returncode == 0 and json.loads(status.stdout)["missing_count"] == len(doc["files"])
    # a progress file left by an older downloader (no schema) is not read, and does not stop
    # the download from being judged by its verified files (an upgrade mid-download)
    (tmp_path / "old.json").write_text(json.dumps({"state": "running", "bytes_done": 5}))
    status = subprocess.run([sys.executable, "-c", bundled("weights_status.py"), str(node.hf_home),
                             str(tmp_path / "old.json"), str(tmp_path / "none.pid")],
                            input=json.dumps(doc), capture_output=True, text=True)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["progress"] is None


def test_bad_input_and_busy_cache_exit_codes(hub, tmp_path):
    node = Node(tmp_path / "node", hub)
    good = node.manifest.read_text()
    node.manifest.write_text(json.dumps(protocol.with_schema(
        {"repo": "x/y", "sha": "abc", "endpoint": hub.url, "files": []})))
    result = node.run()
    assert result.returncode == 2 and "manifest" in result.stderr
    assert node.read_progress()["state"] == "failed"

    node.manifest.write_text(good)
    node.progress.unlink()
    lock_dir = node.hf_home / "hub" / ".locks" / "models--moonshotai--Kimi-K3"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / "k3deploy-fetch-weights.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        result = node.run()
    assert result.returncode == 3 and "already running" in result.stderr
    assert not node.progress.exists()


def test_sigterm_stops_cleanly_and_keeps_partial_bytes(tmp_path):
    with tbhub.serve_in_thread(tmp_path / "hub", shards=2, shard_bytes=200_000, rate=100_000) as slow:
        node = Node(tmp_path / "node", slow, max_workers=2)
        shards = [slow.repo.file(n) for n in slow.repo.shard_names()]
        proc = node.start()
        partials = [node.storage / "blobs" / f"{f.etag}.incomplete" for f in shards]
        deadline = time.time() + 30
        while time.time() < deadline and not all(p.exists() and p.stat().st_size >= 30_000 for p in partials):
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=20)[0].decode()
        assert proc.returncode == 1, output
        progress = node.read_progress()
        assert progress["state"] == "failed" and progress["error"] == "stopped by a signal"
        kept = {f.path: p.stat().st_size for f, p in zip(shards, partials)}
        assert all(size >= 30_000 for size in kept.values())
        hub_done(slow)
        before = served(slow)
        assert node.run().returncode == 0
        after = served(slow)
    for f in shards:
        assert gets_and_bytes(after, f.path)[1] - gets_and_bytes(before, f.path)[1] == f.size - kept[f.path]


def test_size_disagreeing_with_the_hub_fails_fast(hub, tmp_path):
    node = Node(tmp_path / "node", hub)
    doc = json.loads(node.manifest.read_text())
    shard = next(f for f in doc["files"] if f["sha256"])
    shard["size"] += 1
    node.manifest.write_text(json.dumps(doc))
    started = time.monotonic()
    result = node.run()
    assert result.returncode == 1 and time.monotonic() - started < 10
    assert f"{shard['path']}: the server has {shard['size'] - 1} bytes" in result.stderr

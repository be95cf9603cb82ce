"""k3deploy/remote/fetch_weights.py against the in-process mock Hub on loopback (no root needed):
a full run writes the cache huggingface_hub itself would, a rerun fetches nothing verified, bad
local or served bytes are fetched again. The simulated node is fetch_node.py's; interrupted
runs are in test_fetch_weights_resume.py, refused inputs in test_fetch_weights_inputs.py.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from fetch_node import STORAGE, Node, clean_env, gets_and_bytes, python_with_hf, served
from tb import hub as tbhub

from k3deploy.remote import protocol


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
        "hub_bytes": total, "peer_bytes": 0, "peer_bytes_by": {}, "bad_peers": [], "transient": False,
        "disk": None, "worker_processes": 1}   # a few MB: one process (fetch_workers.count)
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

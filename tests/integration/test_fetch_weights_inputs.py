"""What fetch_weights.py refuses, and how it says so (no root needed): a gated Hub without the
token (which comes from the env file and is never printed), a manifest of another schema
version, a bad manifest or a busy cache, a size that disagrees with the Hub."""
from __future__ import annotations

import fcntl
import json
import subprocess
import sys
import time

from fetch_node import Node, served
from tb import hub as tbhub

from k3deploy.remote import bundled, protocol


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

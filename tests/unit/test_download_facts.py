"""The download's status as the node programs print it (remote/weights_status.py, with the
downloader's progress document from remote/fetch_progress.py inside) parsed into the typed
records the laptop reads (k3deploy/facts/download.py)."""

import dataclasses
import hashlib
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import k3deploy.remote.fetch_weights  # noqa: F401 (puts the node-side directory on sys.path)
from k3deploy.facts import download
from k3deploy.remote import bundled
from k3deploy.steps.weights.download import DownloadWeights
from tests.unit import typed

fetch_base = importlib.import_module("fetch_base")
fetch_manifest = importlib.import_module("fetch_manifest")
fetch_progress = importlib.import_module("fetch_progress")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "steps"
SHARD = {"path": "model-00001-of-00002.safetensors", "size": 1000, "sha256": "e" * 64}
CONFIG = {"path": "config.json", "size": 10, "oid": "c" * 40}
MANIFEST = {"schema": 1, "repo": "moonshotai/Kimi-K3", "sha": "a" * 40, "files": [CONFIG, SHARD]}


def progress_document(path: Path) -> dict:
    """What a downloader that met a full disk after peer and Hub bytes writes."""
    progress = fetch_progress.Progress(path, [fetch_manifest.FileSpec(f) for f in (CONFIG, SHARD)])
    progress.received_bytes(fetch_manifest.FileSpec(SHARD), 300, source="hub")
    progress.received_bytes(fetch_manifest.FileSpec(SHARD), 200, source="node1")
    progress.bad_peers.add("node2")
    progress.disk = fetch_base.DiskFault("/hf/blobs/e.k3deploy-partial", "No space left on device",
                                         500, 40).document()
    progress.state, progress.error = "failed", "model-00001: No space left on device"
    progress.write()
    return json.loads(path.read_text())


def weights_status(tmp_path: Path, *peer_args: str) -> subprocess.CompletedProcess:
    pid = tmp_path / "fetch.pid"
    pid.write_text("")
    return subprocess.run([sys.executable, "-c", bundled("weights_status.py"), str(tmp_path / "hf"),
                           str(tmp_path / "progress.json"), str(pid), *peer_args],
                          input=json.dumps(MANIFEST), capture_output=True, text=True, timeout=30)


def test_the_status_weights_status_prints_with_the_downloaders_progress(tmp_path):
    doc = progress_document(tmp_path / "progress.json")
    (tmp_path / "peer.secret").write_text("s3cret")
    out = weights_status(tmp_path, str(tmp_path / "peer.pid"), str(tmp_path / "none.json"),
                         str(tmp_path / "peer.secret"))
    found = download.parse_status(out.stdout, out.returncode)
    # the one reading of the progress document (remote/protocol.py): its writer is gone
    seen = found.downloader
    assert (seen.state, seen.said, seen.alive, seen.pid) == ("failed", "failed", False, None)
    assert seen.written == (tmp_path / "progress.json").stat().st_mtime
    assert dataclasses.replace(found, downloader=None) == download.WeightsStatus(
        total=2, missing_count=2, partial_bytes=0, verified_bytes=0, running=False,
        progress=download.Progress(
            error="model-00001: No space left on device", bytes_total=1010, bytes_done=500,
            shards_total=1, shards_done=0, hub_bytes=300, peer_bytes=200, bad_peers=("node2",),
            transient=False,
            disk=download.DiskFault("/hf/blobs/e.k3deploy-partial", "No space left on device",
                                    500, 40)),
        peer=download.PeerServer(running=False, manifest_sha256=None,
                                 secret_sha256=hashlib.sha256(b"s3cret").hexdigest()))
    assert not found.complete
    # every field is a key the programs write: nothing the laptop reads is made up
    assert {f.name for f in dataclasses.fields(download.Progress)} <= set(doc)
    assert {f.name for f in dataclasses.fields(download.DiskFault)} <= set(doc["disk"])
    printed = json.loads(out.stdout)
    assert {f.name for f in dataclasses.fields(download.WeightsStatus)} <= set(printed)
    assert {f.name for f in dataclasses.fields(download.PeerServer)} <= set(printed["peer"])


def test_before_the_first_start_there_is_no_progress_and_no_peer_server_without_fan_out(tmp_path):
    out = weights_status(tmp_path)
    found = download.parse_status(out.stdout, out.returncode)
    assert (found.progress, found.peer, found.running, found.missing_count) == (None, None, False, 2)


def test_what_is_not_a_status_document_is_unreadable(tmp_path):
    assert download.parse_status("sh: 1: python3: not found\n", 127) == \
        download.Unreadable("sh: 1: python3: not found\n", 127)
    assert isinstance(download.parse_status('{"other": 1}', 0), download.Unreadable)
    assert isinstance(download.parse_status("", 1), download.Unreadable)


def test_a_progress_document_of_an_older_downloader_lacks_counters_and_still_parses():
    found = download.progress({"schema": 1, "state": "running", "bytes_total": 9, "bytes_done": 3})
    assert (found.bytes_done, found.hub_bytes, found.bad_peers, found.disk) == (3, 0, (), None)


def test_a_misspelt_or_missing_field_in_a_download_fixture_fails():
    facts = json.loads((FIXTURES / "download-fresh.json").read_text())["facts"]
    assert typed.facts(DownloadWeights, facts).status.missing_count == 1
    status = facts["status"]
    misspelt = {("runing" if k == "running" else k): v for k, v in status.items()}
    with pytest.raises(TypeError, match="runing"):
        typed.facts(DownloadWeights, {**facts, "status": misspelt})
    with pytest.raises(TypeError, match="token_file"):
        typed.facts(DownloadWeights, {k: v for k, v in facts.items() if k != "token_file"})

"""remote/fetch_workers.py's pure parts: which files each worker owns, how many workers, what
their ended documents add up to; fetch_progress's absorb of the workers' documents."""
from __future__ import annotations

import hashlib
from types import SimpleNamespace

import k3deploy.remote.fetch_weights  # noqa: F401 (puts the node-side directory on sys.path)
import fetch_workers  # noqa: E402
from fetch_manifest import FileSpec  # noqa: E402
from fetch_progress import Progress  # noqa: E402


def spec(name: str, size: int) -> FileSpec:
    return FileSpec({"path": name, "size": size, "sha256": hashlib.sha256(name.encode()).hexdigest()})


def test_every_file_is_one_workers_and_the_bytes_are_spread_evenly():
    files = [spec("config.json", 3_000)] + [spec(f"model-{i:05d}.safetensors", 16 << 30) for i in range(96)]
    shares = [fetch_workers.share(files, 8, i) for i in range(8)]
    assert sorted(f.path for s in shares for f in s) == sorted(f.path for f in files)
    loads = [sum(f.size for f in s) for s in shares]
    assert max(loads) - min(loads) <= 16 << 30   # one shard apart at most
    for s in shares:   # each worker goes through its files in the manifest's order
        assert [files.index(f) for f in s] == sorted(files.index(f) for f in s)


def test_the_count_is_asked_or_what_the_bytes_repay_at_most_the_cores_and_the_files(monkeypatch):
    monkeypatch.setattr(fetch_workers.os, "cpu_count", lambda: 64)
    big = SimpleNamespace(worker_processes=None, files=[spec(f"s{i}", 16 << 30) for i in range(96)])
    small = SimpleNamespace(worker_processes=None, files=[spec(f"s{i}", 2 << 20) for i in range(8)])
    asked = SimpleNamespace(worker_processes=3, files=small.files)
    two_files = SimpleNamespace(worker_processes=8, files=small.files[:2])
    assert fetch_workers.count(big) == fetch_workers.MAX_PROCESSES
    assert fetch_workers.count(small) == 1   # 16 MB do not repay a second interpreter
    assert fetch_workers.count(asked) == 3 and fetch_workers.count(two_files) == 2


def test_the_ended_workers_errors_are_transient_only_when_every_one_is():
    ok = {"exit": 0, "state": "done"}
    budget = {"exit": 1, "state": "failed", "error": "a: no new byte for 900s", "transient": True}
    fatal = {"exit": 1, "state": "failed", "error": "b: HTTP 404", "transient": False}
    killed = {"exit": -9}
    assert fetch_workers.outcome([ok, ok]) == ([], False, None)
    assert fetch_workers.outcome([ok, budget]) == (["a: no new byte for 900s"], True, None)
    assert fetch_workers.outcome([budget, fatal])[1] is False
    errors, transient, _ = fetch_workers.outcome([ok, killed])
    assert errors == ["worker process 1 ended with exit code -9 and no error"] and not transient
    disk = {"path": "/nvme/hf", "reason": "No space left on device (ENOSPC)"}
    assert fetch_workers.outcome([{**fatal, "disk": disk}, ok])[2] == disk


def test_the_parents_document_adds_up_its_workers(tmp_path):
    files = [spec("a", 100), spec("b", 200), spec("c", 300)]
    workers = [Progress(tmp_path / f"w{i}", files, detail=True) for i in range(2)]
    workers[0].received_bytes(files[0], 100)
    workers[0].file_done(files[0])
    workers[1].received_bytes(files[1], 50, "node2")
    workers[1].received_bytes(files[2], 30)
    workers[1].bad_peers.add("node3")
    parent = Progress(tmp_path / "p", files)
    parent.absorb([w.document() for w in workers])
    doc = parent.document()
    assert (doc["files_done"], doc["bytes_done"], doc["hub_bytes"]) == (1, 180, 130)
    assert doc["peer_bytes_by"] == {"node2": 50}
    assert doc["bad_peers"] == ["node3"] and "detail" not in doc

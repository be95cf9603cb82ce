"""fetch_weights.py over two worker processes (remote/fetch_workers.py) against the in-process
mock Hub: every file verified once, the node's one progress document; a SIGKILL of the parent
takes its workers with it and the re-run resumes their partials; a SIGTERM stops them all."""
from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from fetch_node import Node, gets_and_bytes, hub_done, served
from polling import wait_until
from tb import hub as tbhub


def two_workers(node: Node) -> Node:
    doc = json.loads(node.manifest.read_text())
    node.manifest.write_text(json.dumps({**doc, "worker_processes": 2}))
    return node


def workers_of(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(p) for p in (task / "children").read_text().split()]
    return out


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def start_until(node: Node, shards, on_disk: int):
    """The downloader started and its workers, once `on_disk` bytes of `shards` are on disk."""
    proc = node.start()
    try:
        wait_until(lambda: sum(node.on_disk(f) for f in shards) > on_disk, 30, "bytes on disk")
        return proc, workers_of(proc.pid)
    except BaseException:
        proc.kill()
        proc.wait()
        raise


def test_two_workers_fetch_every_file_once_into_one_progress_document(tmp_path):
    with tbhub.serve_in_thread(tmp_path / "hub", shards=6, shard_bytes=300_000) as hub:
        node = two_workers(Node(tmp_path / "node", hub, max_workers=4))
        result = node.run()
        assert result.returncode == 0, result.stdout + result.stderr
        stats = served(hub)
    doc = node.read_progress()
    assert doc["state"] == "done" and doc["worker_processes"] == 2
    assert doc["files_done"] == len(hub.repo.files) and doc["bytes_done"] == hub.repo.total_bytes
    assert doc["hub_bytes"] >= sum(f.size for f in hub.repo.files if f.size)
    for f in hub.repo.files:
        assert node.blob(f).exists() and gets_and_bytes(stats, f.path)[1] == f.size, f.path
    assert "2 worker processes" in result.stdout
    # Each worker recorded its own files into the one ledger the laptop's look reads.
    seen = node.status()
    assert seen["missing_count"] == 0 and not seen["running"], seen
    assert sorted(p.name for p in node.root.iterdir() if ".w" in p.name) == []   # the workers' documents
    assert node.leftovers() == []


def test_a_killed_parent_takes_its_workers_and_the_rerun_resumes_their_partials(tmp_path):
    with tbhub.serve_in_thread(tmp_path / "hub", shards=6, shard_bytes=300_000, rate=300_000) as slow:
        node = two_workers(Node(tmp_path / "node", slow, max_workers=4))
        shards = [slow.repo.file(n) for n in slow.repo.shard_names()]
        proc, workers = start_until(node, shards, 200_000)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert len(workers) == 2
        wait_until(lambda: not any(alive(w) for w in workers), 10, "the workers to die with their parent")
        hub_done(slow)
        verified = {f.path for f in shards if node.blob(f).exists()}
        kept = {f.path: node.kept(f) for f in shards if node.partial(f).exists()}
        assert any(kept.values()), kept
        first = served(slow)
        result = node.run()
        assert result.returncode == 0, result.stdout + result.stderr
        second = served(slow)
    for f in shards:
        gets0, bytes0 = gets_and_bytes(first, f.path)
        gets1, bytes1 = gets_and_bytes(second, f.path)
        if f.path in verified:
            assert gets1 == gets0, f"{f.path} was verified before the kill yet fetched again"
        else:   # only what the record did not name comes again
            assert bytes1 - bytes0 == f.size - kept.get(f.path, 0), f.path
    assert node.read_progress()["state"] == "done" and node.leftovers() == []


def test_sigterm_to_the_parent_stops_every_worker_and_keeps_their_bytes(tmp_path):
    with tbhub.serve_in_thread(tmp_path / "hub", shards=4, shard_bytes=400_000, rate=200_000) as slow:
        node = two_workers(Node(tmp_path / "node", slow, max_workers=4))
        shards = [slow.repo.file(n) for n in slow.repo.shard_names()]
        proc, workers = start_until(node, shards, 100_000)
        try:
            began = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 1 and b"stopped by a signal" in out, out[-2000:]
        assert time.monotonic() - began < 15 and not any(alive(w) for w in workers)
    assert node.read_progress()["state"] == "failed"
    assert sum(node.kept(f) for f in shards if node.partial(f).exists()) > 0

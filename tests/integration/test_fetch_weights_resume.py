"""fetch_weights.py interrupted and run again (no root needed): after SIGKILL it resumes from
its partial files, it adopts the partial a killed huggingface_hub left, and SIGTERM stops it
cleanly keeping its partial bytes. Each test has its own rate-limited mock Hub."""
from __future__ import annotations

import hashlib
import signal
import subprocess
import sys
import time
from pathlib import Path

from fetch_node import Node, clean_env, gets_and_bytes, hub_done, served
from polling import wait_until
from tb import hub as tbhub


BLOCK = 4096  # the allocation unit of the filesystems tmp_path is on here (ext4, tmpfs)


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
        partial = {f.path: node.kept(f) for f in shards if node.partial(f).exists()}
        on_disk = sum(node.on_disk(f) for f in shards)
        assert any(p in verified for p in slow.repo.shard_names()) and any(partial.values())
        # every finished range survives: what the record does not name is at most 5% of the disk.
        # "On disk" is the allocated size, whole filesystem blocks: each range's two ends may
        # each round up by a block the record rightly does not name.
        rounding = sum(2 * BLOCK * len(node.ranges(f) or [None]) for f in shards
                       if f.path in partial)
        assert sum(partial.values()) >= 0.95 * on_disk - rounding, (partial, on_disk)
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
            # killed after its last byte but before its rename: the rerun needs no request for it
            wanted = 0 if partial[f.path] == f.size else 1
            assert (gets1 - gets0, bytes1 - bytes0) == (wanted, f.size - partial[f.path]), f.path
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
        parts = [node.partial(f) for f in shards]
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


def test_sigterm_stops_cleanly_and_keeps_partial_bytes(tmp_path):
    with tbhub.serve_in_thread(tmp_path / "hub", shards=2, shard_bytes=200_000, rate=100_000) as slow:
        node = Node(tmp_path / "node", slow, max_workers=2)
        shards = [slow.repo.file(n) for n in slow.repo.shard_names()]
        proc = node.start()
        partials = [node.partial(f) for f in shards]
        try:
            wait_until(lambda: all(p.exists() and p.stat().st_size >= 30_000 for p in partials), 30,
                       "30 kB of each shard on disk", interval=0.02)
        finally:
            proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=20)[0].decode()
        assert proc.returncode == 1, output
        progress = node.read_progress()
        assert progress["state"] == "failed" and progress["error"] == "stopped by a signal"
        kept = {f.path: node.kept(f) for f in shards}
        assert all(size >= 30_000 for size in kept.values())
        hub_done(slow)
        before = served(slow)
        assert node.run().returncode == 0
        after = served(slow)
    for f in shards:
        assert gets_and_bytes(after, f.path)[1] - gets_and_bytes(before, f.path)[1] == f.size - kept[f.path]

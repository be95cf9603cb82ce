"""fetch_weights.py on a file system on a device (no root needed): its partial files are open
with O_DIRECT while many ranges land at once, and every blob comes out with its sha256. The
testbed's nodes keep their disks in memory (tmpfs), where the downloader writes through the
page cache; this is where the direct path runs end to end, against the mock Hub."""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from fetch_node import Node
from odirect import takes_o_direct
from tb import hub as tbhub


@pytest.fixture
def on_disk(tmp_path):
    """tmp_path where it is on a device, else a directory under /var/tmp (removed after)."""
    if takes_o_direct(tmp_path):
        yield tmp_path
        return
    root = Path(tempfile.mkdtemp(prefix="k3-direct-", dir="/var/tmp"))
    try:
        if not takes_o_direct(root):
            pytest.skip("neither the temp directory nor /var/tmp is on a file system that takes O_DIRECT")
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _direct_partials(pid: int) -> set[str]:
    """Names of the .k3deploy-partial files process `pid` holds open with O_DIRECT."""
    found = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return found
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            flags = Path(f"/proc/{pid}/fdinfo/{fd}").read_text().split("flags:")[1].split()[0]
        except (OSError, IndexError):
            continue
        if target.endswith(".k3deploy-partial") and int(flags, 8) & os.O_DIRECT:
            found.add(Path(target).name)
    return found


def test_partials_on_a_device_are_written_past_the_page_cache_and_verify(on_disk):
    with tbhub.serve_in_thread(on_disk / "hub", shards=3, shard_bytes=3_000_001, rate=1_000_000) as slow:
        node = Node(on_disk / "node", slow)
        proc = node.start()
        seen: set[str] = set()
        try:
            while proc.poll() is None:
                seen |= _direct_partials(proc.pid)
                time.sleep(0.02)
            out = proc.stdout.read().decode()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
        assert proc.returncode == 0, out
        shards = [slow.repo.file(n) for n in slow.repo.shard_names()]
        # Every shard's partial was open with O_DIRECT (the small files' may be too: every file
        # is written the same way); nothing else was.
        assert {node.partial(f).name for f in shards} <= seen, seen
        assert seen <= {node.partial(f).name for f in slow.repo.files}
        for f in shards:
            assert hashlib.sha256(node.blob(f).read_bytes()).hexdigest() == f.sha256, f.path
        assert node.read_progress()["state"] == "done" and node.leftovers() == []

"""remote/direct_io.py: a partial's bytes written and read back past the page cache where the
file system takes O_DIRECT, through it where it does not; either way every byte lands where
it was sent and the hash reads back exactly the range it asks for."""
from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import random
import tempfile

import pytest

from k3deploy.remote import fetch_weights  # noqa: F401  (puts the node-side modules on sys.path)
import direct_io  # noqa: E402
from direct_io import ALIGN, DiskFile  # noqa: E402
from odirect import takes_o_direct  # noqa: E402

REAL_OPEN, REAL_PWRITE = os.open, os.pwrite


@pytest.fixture
def target(tmp_path):
    path = tmp_path / "blob.partial"
    path.write_bytes(b"")
    if not takes_o_direct(tmp_path):
        pytest.skip(f"{tmp_path}'s file system is in memory or refuses O_DIRECT")
    return path


def test_a_file_kept_in_memory_gets_buffered_io():
    """tmpfs takes O_DIRECT, but there is no device to hand the buffer to."""
    if not os.path.isdir("/dev/shm") or direct_io.fs_type(os.stat("/dev/shm").st_dev) != "tmpfs":
        pytest.skip("no tmpfs at /dev/shm")
    fd, name = tempfile.mkstemp(dir="/dev/shm")
    os.close(fd)
    try:
        disk = DiskFile(name)
        body = os.urandom(direct_io.WRITE_BUFFER + 100)
        with open(name, "r+b") as f:
            disk.write(f.fileno(), body, 0)
        assert not disk.direct
        assert open(name, "rb").read() == body
    finally:
        os.unlink(name)


def _writes(size: int, seed: int):
    """Ranges of [0, size) in a shuffled order, with unaligned ends and some longer than the
    write buffer, as connections deliver them."""
    rnd, cuts = random.Random(seed), {0, size}
    while len(cuts) < 24:
        cuts.add(rnd.randrange(1, size))
    edges = sorted(cuts)
    ranges = list(zip(edges, edges[1:]))
    rnd.shuffle(ranges)
    return ranges


def _fill(path, body: bytes, seed: int) -> DiskFile:
    disk = DiskFile(path)
    with open(path, "r+b") as f:
        for start, end in _writes(len(body), seed):
            disk.write(f.fileno(), memoryview(body)[start:end], start)
    return disk


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_unaligned_ranges_in_any_order_land_whole_and_hash_back_exactly(target, seed):
    body = os.urandom(3 * direct_io.WRITE_BUFFER + 12345)
    disk = _fill(target, body, seed)
    assert disk.direct and target.read_bytes() == body
    rnd = random.Random(seed)
    for _ in range(8):
        start = rnd.randrange(0, len(body))
        stop = rnd.randrange(start, len(body) + 1)
        hasher = hashlib.sha256()
        assert disk.hash_into(hasher, start, stop) == stop - start
        assert hasher.hexdigest() == hashlib.sha256(body[start:stop]).hexdigest()
    disk.close()


def test_only_the_unaligned_ends_go_through_the_page_cache(target, monkeypatch):
    calls = []

    def pwrite(fd, data, at):
        calls.append((bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT), at, len(data)))
        return REAL_PWRITE(fd, data, at)
    monkeypatch.setattr(os, "pwrite", pwrite)
    body = os.urandom(3 * ALIGN + 2 * direct_io.WRITE_BUFFER)
    start = 100
    disk = _fill_one(target, body, start)
    direct = [(at, n) for d, at, n in calls if d]
    buffered = [(at, n) for d, at, n in calls if not d]
    end = start + len(body)
    assert buffered == [(start, ALIGN - start), (end // ALIGN * ALIGN, end % ALIGN)]
    assert sum(n for _, n in direct) == len(body) - sum(n for _, n in buffered)
    assert all(at % ALIGN == 0 and n % ALIGN == 0 for at, n in direct)
    assert target.read_bytes()[start:] == body
    disk.close()


def _fill_one(path, body: bytes, at: int) -> DiskFile:
    disk = DiskFile(path)
    with open(path, "r+b") as f:
        disk.write(f.fileno(), body, at)
    return disk


def test_a_file_system_refusing_o_direct_at_the_open_gets_buffered_io(tmp_path, monkeypatch):
    def refusing(path, flags, *mode):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return REAL_OPEN(path, flags, *mode)
    monkeypatch.setattr(os, "open", refusing)
    path = tmp_path / "blob.partial"
    path.write_bytes(b"")
    body = os.urandom(2 * direct_io.WRITE_BUFFER + 777)
    disk = _fill(path, body, 4)
    hasher = hashlib.sha256()
    assert not disk.direct and path.read_bytes() == body
    assert disk.hash_into(hasher, 5, len(body)) == len(body) - 5
    assert hasher.hexdigest() == hashlib.sha256(body[5:]).hexdigest()


def test_a_direct_write_refused_with_einval_is_written_buffered_and_direct_io_stops(target, monkeypatch):
    def pwrite(fd, data, at):
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return REAL_PWRITE(fd, data, at)
    monkeypatch.setattr(os, "pwrite", pwrite)
    body = os.urandom(direct_io.WRITE_BUFFER + 3 * ALIGN)
    disk = _fill_one(target, body, 0)
    assert not disk.direct and target.read_bytes() == body


def test_a_full_disk_raises_after_the_blocks_it_took(target, monkeypatch):
    left = [2 * ALIGN]

    def pwrite(fd, data, at):
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            n = min(len(data), left[0])
            if not n:
                raise OSError(errno.ENOSPC, "No space left on device")
            left[0] -= n
            return REAL_PWRITE(fd, data[:n], at)
        return REAL_PWRITE(fd, data, at)
    monkeypatch.setattr(os, "pwrite", pwrite)
    body = os.urandom(8 * ALIGN)
    with pytest.raises(OSError) as caught:
        _fill_one(target, body, 0)
    assert caught.value.errno == errno.ENOSPC
    assert target.read_bytes() == body[:2 * ALIGN]


@pytest.mark.parametrize("start", [0, 100, ALIGN + 7])
def test_bytes_on_aligned_memory_at_their_file_offset_go_to_the_disk_without_a_copy(target, start):
    """A reader putting file offset X at buffer offset X % ALIGN (direct_io.aligned) hands over
    memory the device takes as is: the aligned bounce buffer is never made."""
    body = os.urandom(2 * direct_io.WRITE_BUFFER + 3 * ALIGN + 5)
    buf = direct_io.aligned(len(body))
    at = start % ALIGN
    buf[at:at + len(body)] = body
    disk = DiskFile(target)
    with open(target, "r+b") as f:
        disk.write(f.fileno(), buf[at:at + len(body)], start)
    assert disk.direct and disk._wbuf is None
    assert target.read_bytes()[start:] == body
    with open(target, "r+b") as f:   # memory one byte off its file offset's alignment
        disk.write(f.fileno(), buf[at + 1:at + 1 + 2 * ALIGN], start + ALIGN)
    assert disk._wbuf is not None   # copied through it
    assert target.read_bytes()[start + ALIGN:start + 3 * ALIGN] == body[1:1 + 2 * ALIGN]
    disk.close()

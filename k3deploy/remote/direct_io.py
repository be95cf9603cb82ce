"""A partial blob's bytes to and from the disk past the page cache (O_DIRECT), where the file
system takes it.

A buffered write copies every byte into a page-cache page the kernel first has to find, and
a node's 1.56 TB through the page cache evicts whatever else it holds (the image's layers, the
engine's own files). O_DIRECT hands the device the process's own buffer. It needs the file
offset, the length and the memory aligned to the device's block: the aligned middle of a write
is copied into an aligned buffer (mmap: page-aligned) and written direct; its unaligned ends
go through the page cache. Linux keeps the two coherent: a direct read or write first writes
back and drops the cached pages of its range (iomap_dio_rw, filemap_write_and_wait_range).

The hash reads back what other connections wrote the same way, into a second aligned buffer
(the writer and the hash hold different locks). A file system that refuses O_DIRECT (EINVAL
at the open or at a write) gets buffered writes and reads, as before; so does one kept in
memory (tmpfs), which takes O_DIRECT but has no device to hand the buffer to: there the copy
into the aligned buffer would be one more for nothing.
"""
from __future__ import annotations

import ctypes
import errno
import mmap
import os
from typing import Protocol

ALIGN = 4096            # covers 512-byte and 4 KiB logical blocks alike
WRITE_BUFFER = 1 << 20
READ_BUFFER = 4 << 20
IN_MEMORY = frozenset({"tmpfs", "ramfs"})
_fs_types: dict[int, str] = {}


class Hasher(Protocol):
    """What hash_into feeds: hashlib's objects (fetch_manifest.py FileSpec.new_hasher)."""
    def update(self, data: bytes | memoryview, /) -> None: ...


def _mapped(size: int) -> memoryview:
    return memoryview(mmap.mmap(-1, size))   # mmap: its first byte is page-aligned


def aligned(size: int) -> memoryview:
    """A receive buffer for `size` bytes placed by `place`: write() hands its aligned middle
    to the device as is, with no copy into the aligned buffer."""
    return _mapped(size + ALIGN)


def place(offset: int) -> int:
    """Where in an `aligned` buffer the byte of file offset `offset` goes: at the same
    remainder modulo ALIGN, so the file's aligned offsets fall on aligned memory."""
    return offset % ALIGN


def _address(view: memoryview) -> int | None:
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(view))
    except (TypeError, ValueError):   # read-only or empty: copied into the aligned buffer
        return None


def pwrite_all(fd: int, view: memoryview, at: int) -> None:
    while view:   # a disk filling up takes part of a write before it refuses the rest
        n = os.pwrite(fd, view, at)
        view, at = view[n:], at + n


class DiskFile:
    """Direct I/O on one partial file, buffered where it cannot be direct. Callers serialise
    write() among themselves and hash_into() among themselves."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path, self.fd = path, None
        self._wbuf: memoryview | None = None
        self._rbuf: memoryview | None = None
        try:
            self.fd = os.open(path, os.O_RDWR | os.O_DIRECT)
        except OSError as e:
            if e.errno != errno.EINVAL:
                raise
            return
        if fs_type(os.fstat(self.fd).st_dev) in IN_MEMORY:
            self.close()

    @property
    def direct(self) -> bool:
        return self.fd is not None

    def write(self, buffered_fd: int, data: bytes | bytearray | memoryview, at: int) -> None:
        view, end = memoryview(data).cast("B"), at + len(data)
        lo = min(end, -(-at // ALIGN) * ALIGN)
        hi = max(lo, end // ALIGN * ALIGN)
        if not self.direct or hi == lo:
            pwrite_all(buffered_fd, view, at)
            return
        pwrite_all(buffered_fd, view[:lo - at], at)
        done = self._write_direct(view[lo - at:hi - at], lo)
        pwrite_all(buffered_fd, view[lo - at + done:], lo + done)

    def _write_direct(self, view: memoryview, at: int) -> int:
        """Bytes of `view` written direct: all of them, unless the file system turned out to
        refuse O_DIRECT or a short write left an unaligned rest (the caller writes it buffered).
        From `view` itself where its memory is aligned, else through the aligned buffer."""
        fd = self.fd
        assert fd is not None, "write() writes direct only while the file is open direct"
        address = _address(view)
        buf = None if address is not None and address % ALIGN == 0 else self._write_buffer()
        done = 0
        while done < len(view):
            n = len(view) - done if buf is None else min(len(buf), len(view) - done)
            if buf is not None:
                buf[:n] = view[done:done + n]
            try:
                wrote = os.pwrite(fd, view[done:done + n] if buf is None else buf[:n], at + done)
            except OSError as e:
                if e.errno != errno.EINVAL:
                    raise
                self.close()
                return done
            done += wrote
            if wrote < n and (not wrote or (at + done) % ALIGN):
                return done
        return done

    def hash_into(self, hasher: Hasher, start: int, stop: int) -> int:
        """Feeds bytes [start, stop) of the file to `hasher`; returns how many it fed (fewer
        only if the file ends first)."""
        if self.fd is None:  # not direct
            return _hash_buffered(self.path, hasher, start, stop)
        buf, at, fed = self._read_buffer(), start // ALIGN * ALIGN, 0
        while start + fed < stop:
            want = min(len(buf), -(-(stop - at) // ALIGN) * ALIGN)
            got = os.preadv(self.fd, [buf[:want]], at)
            lo, hi = start + fed - at, min(stop - at, got)
            if hi <= lo:
                break
            hasher.update(buf[lo:hi])
            fed, at = fed + hi - lo, at + got
            if got < want:
                break
        return fed

    def _write_buffer(self) -> memoryview:
        if self._wbuf is None:
            self._wbuf = _mapped(WRITE_BUFFER)
        return self._wbuf

    def _read_buffer(self) -> memoryview:
        if self._rbuf is None:
            self._rbuf = _mapped(READ_BUFFER)
        return self._rbuf

    def __del__(self) -> None:
        self.close()

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        for view in (self._wbuf, self._rbuf):
            if view is not None:
                mem = view.obj
                view.release()
                try:
                    if isinstance(mem, mmap.mmap):  # always: _mapped's buffers
                        mem.close()
                except BufferError:   # a slice still alive: the mapping goes when it does
                    pass
        self._wbuf = self._rbuf = None


def fs_type(dev: int) -> str:
    """The type of the file system mounted from device `dev` (st_dev), from mountinfo."""
    if dev not in _fs_types:
        want = f"{os.major(dev)}:{os.minor(dev)}"
        try:
            with open("/proc/self/mountinfo") as f:
                for line in f:
                    fields = line.split()
                    if fields[2] == want and "-" in fields:
                        _fs_types[dev] = fields[fields.index("-") + 1]
                        break
        except OSError:
            pass
        _fs_types.setdefault(dev, "")
    return _fs_types[dev]


def _hash_buffered(path: str | os.PathLike[str], hasher: Hasher, start: int, stop: int) -> int:
    """By pread on an unbuffered fd: a buffered reader reads ahead past `stop`, into bytes
    other connections have not written yet, and a later seek inside its buffer hands those
    stale bytes back (a wrong digest and a whole file fetched again)."""
    fd, fed = os.open(path, os.O_RDONLY), 0
    try:
        while start + fed < stop:
            chunk = os.pread(fd, min(READ_BUFFER, stop - start - fed), start + fed)
            if not chunk:
                break
            hasher.update(chunk)
            fed += len(chunk)
    finally:
        os.close(fd)
    return fed

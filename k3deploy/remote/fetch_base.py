"""What every part of the node-side downloader (fetch_weights.py) shares: its errors, its log
line and atomic writes.

The downloader's modules are uploaded side by side into the node's work dir (the list is
k3deploy.remote.protocol.DOWNLOADER_FILES) and import each other by plain module name, like
protocol.py: fetch_weights.py, the entry, puts its own directory on sys.path first. Standard
library only.
"""
from __future__ import annotations

import errno
import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import protocol

# errno of a local open, write, allocation or sync that no request to the Hub or a peer changes
LOCAL_FAULTS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM,
                          errno.EIO})


class BadInput(Exception):
    pass


class DownloadError(Exception):
    pass


class HubUnavailable(DownloadError):
    """The retry budget ran out on answers that may change (5xx, 429, timeouts): a later run
    may well succeed, so the laptop restarts the downloader (steps/weights/download.py)."""


class DiskFault(DownloadError):
    """This node's disk refused a write (full, over quota, read-only, not permitted, failing):
    the run stops within seconds instead of waiting out the retry budget, and the laptop
    reports the node, the path, the bytes still needed and the bytes free (steps/weights/download.py).
    Only local I/O is classified so (`on_local_disk`): a socket's error stays a transport error."""

    def __init__(self, path: str | os.PathLike[str], reason: str, needed: int | None = None,
                 free: int | None = None):
        self.path, self.reason, self.needed, self.free = str(path), reason, needed, free
        space = f": {needed} more bytes needed, {free} free" if needed is not None else ""
        super().__init__(f"{self.path}: {reason}{space}")

    def document(self) -> protocol.Doc:
        return {"path": self.path, "reason": self.reason, "needed": self.needed, "free": self.free}


def raise_first(errors: list[str], transient: bool) -> None:
    """Raise the first of the files' `errors`, if any: HubUnavailable when they are all the
    Hub's retry budget (`transient`: a later run may well succeed), else DownloadError."""
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise (HubUnavailable if transient else DownloadError)(sorted(errors)[0] + more)


def local_fault(error: BaseException) -> bool:
    return isinstance(error, OSError) and error.errno in LOCAL_FAULTS


@contextmanager
def on_local_disk(path: str | os.PathLike[str]) -> Iterator[None]:
    """Local file I/O inside: an OSError of LOCAL_FAULTS becomes a DiskFault naming `path`."""
    try:
        yield
    except OSError as e:
        if e.errno is None or not local_fault(e):
            raise
        raise DiskFault(path, f"{e.strerror} ({errno.errorcode.get(e.errno, e.errno)})") from None


class Stopped(Exception):
    pass


def log(message: str) -> None:
    try:
        print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} fetch_weights: {message}", flush=True)
    except OSError as e:   # the log on a full disk: the line is lost, the run goes on
        if not local_fault(e):
            raise


def write_json_atomic(path: Path, doc: protocol.JSONable) -> None:
    # One line: json.dumps with an indent runs the pure-Python encoder, and a file's ranges
    # record rewritten every half second from 32 connections was ~9% of a downloader's GIL time
    # (py-spy --gil, one node on the CDN testbed); without one it is the C encoder.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        tmp.write_text(json.dumps(doc, separators=(",", ":")))
    except OSError:
        tmp.unlink(missing_ok=True)   # a full disk must not keep a half-written copy
        raise
    os.replace(tmp, path)


def overwrite_json(path: Path, doc: protocol.JSONable) -> None:
    """Rewrite `path` in its own blocks (not atomic): on a full disk a new file gets none, and
    the laptop must still read why the run stopped."""
    data = json.dumps(doc, separators=(",", ":")).encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)

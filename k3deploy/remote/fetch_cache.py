"""One repo in the Hugging Face cache as the downloader keeps it: the layout (blobs, partials,
snapshot links, refs, trees; the path rules are protocol.py's), the ledger of verified blobs,
huggingface_hub's lock files, and the free-space check."""
from __future__ import annotations

import fcntl
import os
import re
import shutil
import threading
import time
from pathlib import Path
from types import TracebackType

import protocol
from fetch_base import DiskFault, Stopped, log, write_json_atomic, write_text_atomic
from fetch_manifest import HEX40, FileSpec


PINNED_REF = "k3deploy-pinned"   # refs/<this>: the commit k3deploy last completed
LEDGER_LOCK = "k3deploy-ledger.lock"


class RepoCache:
    """Paths of one repo inside the HF cache, plus the link/ref/tree writers."""

    def __init__(self, hf_home: str, repo: str):
        self.storage = Path(protocol.cache_storage(hf_home, repo))
        self.blobs = Path(protocol.blobs_dir(str(self.storage)))
        self.locks = Path(protocol.cache_locks(hf_home, repo))
        self.ledger = Path(protocol.ledger_path(str(self.storage)))
        for d in (self.blobs, self.locks):
            d.mkdir(parents=True, exist_ok=True)

    def blob(self, etag: str) -> Path:
        return Path(protocol.blob_path(str(self.storage), etag))

    def partial(self, etag: str) -> Path:
        return Path(protocol.partial_path(str(self.storage), etag))

    def ranges(self, etag: str) -> Path:
        return Path(protocol.ranges_path(str(self.storage), etag))

    def orphans(self, etag: str) -> list[Path]:
        """Partials written front to back by others: huggingface_hub >= 1.18's
        blobs/<etag>.<8 hex>.incomplete, and blobs/<etag>.incomplete (huggingface_hub <= 1.17,
        k3deploy before its ranged downloader)."""
        pattern = re.compile(re.escape(etag) + r"\.[0-9a-f]{8}\.incomplete$")
        found = [p for p in self.blobs.glob(f"{etag}.*.incomplete") if pattern.match(p.name)]
        legacy = Path(protocol.legacy_partial_path(str(self.storage), etag))
        return found + ([legacy] if legacy.exists() else [])

    def link(self, sha: str, spec: FileSpec) -> None:
        pointer = Path(protocol.snapshot_path(str(self.storage), sha, spec.path))
        pointer.parent.mkdir(parents=True, exist_ok=True)
        target = os.path.relpath(self.blob(spec.etag), pointer.parent)
        if pointer.is_symlink() and os.readlink(pointer) == target:
            return
        tmp = pointer.with_name(f".{pointer.name}.{os.getpid()}.tmp")
        tmp.unlink(missing_ok=True)
        os.symlink(target, tmp)
        os.replace(tmp, pointer)

    def write_refs(self, revision: str, sha: str) -> None:
        """refs/<branch> and refs/k3deploy-pinned, once snapshots/<sha>/ holds every file.
        huggingface_hub's cache scan (utils/_cache_manager.py _scan_cached_repo) calls a repo
        whose ref names a commit without a snapshot corrupt, and `hf cache prune` deletes
        every snapshot no ref names ("detached"), which a download pinned to a sha is."""
        names = [PINNED_REF] + ([] if revision == sha or HEX40.match(revision) else [revision])
        for name in names:
            ref = self.storage / "refs" / name
            ref.parent.mkdir(parents=True, exist_ok=True)
            if not ref.exists() or ref.read_text() != sha:
                write_text_atomic(ref, sha)

    def write_tree(self, sha: str, files: list[FileSpec]) -> None:
        """trees/<sha>.json, as huggingface_hub >= 1.22 writes it: offline loads then detect missing files."""
        tree = self.storage / "trees" / f"{sha}.json"
        tree.parent.mkdir(parents=True, exist_ok=True)
        doc: protocol.Doc = {"format_version": 1,
                             "files": {f.path: f.tree_entry() for f in sorted(files, key=lambda f: f.path)}}
        write_json_atomic(tree, doc)


class Ledger:
    """Blobs already verified: etag -> size and mtime of the blob at verification time.

    One file for every process of a download (its worker processes each record their own
    files): a record re-reads the file and writes it back under an exclusive lock in the repo's
    .locks directory, so no process's write drops what another recorded."""

    def __init__(self, path: Path, locks: Path | None = None):
        self.path, self.lock = path, threading.Lock()
        self.file_lock = (locks or path.parent) / LEDGER_LOCK
        self.entries = self._read() or {}

    def _read(self) -> protocol.Doc | None:
        """The file's records; None when it cannot be read (or holds no JSON object)."""
        try:
            return protocol.json_object(self.path.read_text())
        except (OSError, ValueError):
            return None

    def refresh(self) -> bool:
        """Read the file again (a reader of another process's records); what was read before
        stays when it cannot be read. True when it was read."""
        found = self._read()
        if found is not None:
            self.entries = found
        return found is not None

    def vouches_for(self, etag: str, st: os.stat_result) -> bool:
        return protocol.ledger_vouches(self.entries.get(etag), st.st_size, st.st_mtime_ns)

    def record(self, etag: str, blob: Path) -> None:
        st = blob.stat()
        entry = protocol.ledger_entry(st.st_size, st.st_mtime_ns, time.time())
        with self.lock:
            fd = os.open(self.file_lock, os.O_RDWR | os.O_CREAT, 0o664)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                self.entries = {**(self._read() or {}), etag: entry}
                write_json_atomic(self.path, self.entries)
            finally:
                os.close(fd)   # closing releases the lock


class etag_lock:
    """fcntl lock on .locks/<repo>/<etag>.lock, the file huggingface_hub's FileLock uses, so a
    concurrent huggingface_hub download of the same blob is waited for rather than raced."""

    def __init__(self, path: Path, stop_event: threading.Event):
        self.path, self.stop_event = path, stop_event

    def __enter__(self) -> etag_lock:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o664)
        waited = False
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                if not waited:
                    log(f"waiting for another process holding {self.path.name}")
                    waited = True
                if self.stop_event.wait(0.5):
                    os.close(self.fd)
                    raise Stopped() from None

    def __exit__(self, _kind: type[BaseException] | None, _err: BaseException | None,
                 _tb: TracebackType | None) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def hold_run_lock(hf_home: str, repo: str) -> int | None:
    """One fetch_weights per cache and repo; returns the open lock fd, or None if another holds it."""
    locks = Path(protocol.cache_locks(hf_home, repo))
    locks.mkdir(parents=True, exist_ok=True)
    fd = os.open(locks / "k3deploy-fetch-weights.lock", os.O_RDWR | os.O_CREAT, 0o664)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def hash_file(path: Path, spec: FileSpec) -> str:
    hasher = spec.new_hasher()
    with open(path, "rb") as f:
        while chunk := f.read(8 << 20):
            hasher.update(chunk)
    return hasher.hexdigest()


def bytes_needed(cache: RepoCache, files: list[FileSpec]) -> int:
    """Bytes still to be written: every file without its blob, less its partial's bytes."""
    needed = 0
    for spec in files:
        if not cache.blob(spec.etag).exists():
            partial = cache.partial(spec.etag)
            needed += spec.size - (protocol.partial_bytes(str(partial)) if partial.exists() else 0)
    return needed


def disk_fault(cache: RepoCache, files: list[FileSpec], fault: DiskFault) -> DiskFault:
    """`fault` with the bytes still needed and the bytes free on the cache's filesystem."""
    return DiskFault(fault.path, fault.reason, bytes_needed(cache, files),
                     shutil.disk_usage(cache.blobs).free)


def check_free_space(cache: RepoCache, files: list[FileSpec]) -> None:
    needed, free = bytes_needed(cache, files), shutil.disk_usage(cache.blobs).free
    if needed > free:
        raise DiskFault(cache.blobs, "not enough free space", needed, free)

"""The peer server's blobs: this node's files of the pinned manifest that the downloader's
ledger vouches for, looked up by etag, and the index a peer asks first (verified, partial, the
downloader's state). Standard library only; uploaded beside peer_server.py
(protocol.DOWNLOADER_FILES), which serves what this module finds.
"""
from __future__ import annotations

import json
import os
import threading
import time
from io import BufferedReader
from pathlib import Path

import protocol
from fetch_cache import Ledger, RepoCache
from fetch_manifest import Manifest

# Every peer asks for the index, 31 of them on a 32-node cluster; each answer opens and checks
# every blob. Peers reuse an index for at least this long anyway (peer_fetch.INDEX_TTL).
INDEX_REUSE = 0.25


class Blobs:
    """The manifest's blobs that the downloader's ledger vouches for, looked up by etag."""

    def __init__(self, manifest: Manifest, cache: RepoCache, progress: Path | None = None):
        self.sizes, self.progress = {f.etag: f.size for f in manifest.files}, progress
        self.cache, self.lock = cache, threading.Lock()
        self.stamp: tuple[int, int] | None = None   # the ledger file's (mtime_ns, inode) when read
        self.ledger = Ledger(cache.ledger)
        self.index_lock = threading.Lock()
        self.last_index: tuple[float, protocol.PeerIndex | None] = (0.0, None)

    def _current_ledger(self) -> Ledger:
        """Re-read when the downloader replaced it (it writes atomically)."""
        try:
            st = self.ledger.path.stat()
        except OSError:
            return self.ledger
        with self.lock:
            if (st.st_mtime_ns, st.st_ino) != self.stamp and self.ledger.refresh():
                self.stamp = (st.st_mtime_ns, st.st_ino)
            return self.ledger

    def open(self, etag: str) -> BufferedReader | None:
        """The open blob if it is verified and whole, else None. Checked on the open file, so a
        blob replaced between the check and the read cannot slip through."""
        size = self.sizes.get(etag)
        if size is None:
            return None
        try:
            f = open(self.cache.blob(etag), "rb")  # noqa: SIM115 (returned open to the sender)
        except OSError:
            return None
        st = os.fstat(f.fileno())
        if st.st_size == size and self._current_ledger().vouches_for(etag, st):
            return f
        f.close()
        return None

    def index(self) -> protocol.PeerIndex:
        """What a peer asks first: which blobs are served, how far the others are. Built at
        most every INDEX_REUSE seconds; the peers asking meanwhile get the same answer."""
        with self.index_lock:
            at, doc = self.last_index
            if doc is None or time.monotonic() - at >= INDEX_REUSE:
                doc = self._build_index()
                self.last_index = (time.monotonic(), doc)
            return doc

    def _build_index(self) -> protocol.PeerIndex:
        # The downloader's state first: "done" (or "failed") is written after its last verify,
        # so the list read after it is complete. Read last, a download finishing between the
        # two said "done" beside a list without its last files, and a peer waiting for one of
        # them would take it from the Hub too ("its owner's download done without it").
        downloader = self._downloader()
        verified: list[str] = []
        partial: dict[str, int] = {}
        for etag in self.sizes:
            blob = self.open(etag)
            if blob is not None:
                blob.close()
                verified.append(etag)
            elif self.partial_bytes(etag):
                partial[etag] = self.partial_bytes(etag)
        return {"verified": verified, "partial": partial, "downloader": downloader}

    def _downloader(self) -> str | None:
        """This node's downloader state ("running", "done", "failed"): a peer waiting for a file
        this node owns goes to the Hub at once when it is no longer running."""
        try:
            return json.loads(self.progress.read_text()).get("state") if self.progress else None
        except (OSError, ValueError):
            return None

    def partial_bytes(self, etag: str) -> int:
        """Bytes the partial holds (protocol.partial_bytes: the ranged downloader writes holes,
        so its length runs ahead); a peer reads their growth as the owner's progress."""
        if etag not in self.sizes:
            return 0
        try:
            return protocol.partial_bytes(str(self.cache.partial(etag)))
        except OSError:
            return 0

"""fetch_weights' peer source: the large files other nodes own, from any peer that has them.

Imported by fetch_weights.py (same directory, standard library only) when its manifest has a
`peers` block: {"self", "port", "secret_file", "nodes": {name: private ip}, "owner": {path:
node}, "stall_seconds"}. A file this node does not own is taken from any peer whose index lists
it verified (peers rotated per node and file, so one owner is not asked by everyone at once);
while none has it and its owner is progressing on it, other files go first (NotYet); a peer
that is unreachable, refuses or stalls longer than stall_seconds is skipped for a while, one that
served bytes failing the checksum is never used again in this run; when no peer can serve it and
its owner shows no progress on anything for stall_seconds (dead, stalled, partitioned) or its
downloader is no longer running, it comes from the Hub (UseHub). The node's own share is asked
of the peers too (a replacement for a reclaimed node finds it there) and comes from the Hub as
soon as every peer answered without it. Bytes from peers land in the same `.incomplete` file
as Hub bytes, so a partial from a
peer resumes from a peer or from the Hub with Range, and is verified like any other.
"""
from __future__ import annotations

import http.client
import json
import os
import threading
import time
import zlib
from collections.abc import Callable
from concurrent.futures import Future
from io import BufferedRandom
from typing import TYPE_CHECKING

import fetch_http
import protocol
from direct_io import aligned, place
from thread_pool import pool  # ships beside this file (protocol.DOWNLOADER_FILES)

if TYPE_CHECKING:   # what fetch_weights hands this module; not imported at run time
    from fetch_manifest import FileSpec
    from fetch_ranges import PartialBlob

INDEX_TTL = 0.5      # seconds a peer's index is reused: 16 workers share one request
# ...and at least this long per peer asked: a node asks each of its N-1 peers, so without it a
# 32-node cluster sends ~2,000 index requests a second, which cost more CPU than the transfers.
INDEX_SHARE = 0.1
RETRY_DOWN = 2.0     # seconds an unreachable or refusing peer is left alone, doubling
INDEX_TIMEOUT = 5.0  # a peer that does not answer its index in this long counts as down
BUFFER = 4 << 20     # at most: a small file's buffer is fetch_http.fill_bytes of it
_buffers = threading.local()   # kept across files: _copy waits for its last write


class NotYet(Exception):
    """No peer has the file verified yet and its owner is progressing: try later."""


class UseHub(Exception):
    """Fetch this file from the Hub (the reason is the message)."""


class PeerError(Exception):
    pass


class PeerBusy(PeerError):
    """503: the peer serves its maximum of connections; it is fine, just not now."""


class Peer:
    def __init__(self, name: str, host: str, port: int):
        self.name, self.host, self.port = name, host, port
        self.bad = False                      # served a checksum mismatch: never again
        self.down_until, self.failures = 0.0, 0
        self.unreachable_since: float | None = None
        self.index: protocol.PeerIndex | None = None
        self.index_at, self.lock = 0.0, threading.Lock()


class Peers:
    def __init__(self, block: protocol.PeerBlock, secret: str, stop_event: threading.Event,
                 stopped: type[BaseException], log: Callable[[str], None], bad: set[str]):
        self.me, self.owner = str(block["self"]), dict(block["owner"])
        self.stall = float(block.get("stall_seconds", 30))
        port = int(block["port"])
        self.peers = {name: Peer(name, ip, port) for name, ip in block["nodes"].items()}
        self.index_ttl = max(INDEX_TTL, INDEX_SHARE * len(self.peers))
        self.auth = {"Authorization": f"Bearer {secret}"}
        self.stop_event, self.stopped, self.log = stop_event, stopped, log
        self.bad = bad  # names of peers never used again; the progress file reports them
        # owner -> (its progress as last seen, since when)
        self.waiting: dict[str, tuple[tuple[int, int] | None, float]] = {}
        self.lock = threading.Lock()
        self.news: set[str] = set()   # etags a peer's index newly lists verified (peer_schedule)

    def owns(self, spec: FileSpec) -> bool:
        """The file is in this node's own share (the laptop's split)."""
        return self.owner.get(spec.path) == self.me

    def wants(self, spec: FileSpec) -> bool:
        """Every large file is asked of the peers first, this node's own share too: a node
        that replaces a reclaimed one (an empty disk) finds its share on the peers that took
        it from its predecessor; on a first bring-up nobody has it and it goes to the Hub."""
        return self.owner.get(spec.path) is not None

    # -- finding a peer -----------------------------------------------------------------
    def _request(self, peer: Peer, method: str, path: str, headers: dict[str, str] | None = None,
                 timeout: float | None = None) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        conn = http.client.HTTPConnection(peer.host, peer.port, timeout=timeout or self.stall)
        try:
            conn.request(method, path, headers={**self.auth, **(headers or {})})
            return conn, conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise PeerError(f"{type(e).__name__}: {e}") from None

    def _index(self, peer: Peer, wait: bool = False) -> protocol.PeerIndex | None:
        """{"verified": [etag], "partial": {etag: bytes}}, or None while unusable. While one
        thread asks a peer, the others use what it said last (a dead peer's timeout must not
        hold up every worker), unless they `wait` for its answer."""
        if not (peer.lock.acquire(timeout=INDEX_TIMEOUT + 1) if wait else peer.lock.acquire(blocking=False)):
            return None if peer.bad else peer.index
        try:
            return self._fresh_index(peer)
        finally:
            peer.lock.release()

    def _fresh_index(self, peer: Peer) -> protocol.PeerIndex | None:
        now = time.monotonic()
        if peer.bad or now < peer.down_until:
            return None
        if now - peer.index_at < self.index_ttl:
            return peer.index
        try:
            conn, response = self._request(peer, "GET", "/index", timeout=INDEX_TIMEOUT)
            try:
                if response.status == 503:  # busy serving: what it had a moment ago holds
                    return peer.index
                if response.status != 200:
                    raise PeerError(f"HTTP {response.status}")
                before = set(_verified(peer.index))
                peer.index = json.loads(response.read())
                self._heard(set(peer.index.get("verified") or ()) - before)
            finally:
                conn.close()
        except (PeerError, OSError, ValueError, http.client.HTTPException) as e:
            self._down(peer, str(e))
            return None
        peer.index_at, peer.unreachable_since, peer.failures = time.monotonic(), None, 0
        return peer.index

    def _heard(self, etags: set[str]) -> None:
        if etags:
            with self.lock:
                self.news |= etags

    def take_news(self) -> set[str]:
        """The etags peers' indexes newly listed verified since the last call."""
        with self.lock:
            news, self.news = self.news, set()
        return news

    def _down(self, peer: Peer, why: str) -> None:
        now = time.monotonic()
        if peer.unreachable_since is None:
            peer.unreachable_since = now
            self.log(f"peer {peer.name} ({peer.host}:{peer.port}) not usable: {why}; skipped")
        peer.failures += 1
        # Backing off, but looked at several times within the stall bound: a peer whose server
        # starts late must be seen before its share is given up to the Hub.
        peer.down_until = now + min(self.stall / 4, RETRY_DOWN * 2 ** (peer.failures - 1))
        peer.index, peer.index_at = None, 0.0

    def holders(self, spec: FileSpec) -> list[Peer]:
        """Peers with the file verified, in an order that differs per node and file."""
        names = sorted(self.peers)
        turn = zlib.crc32(f"{self.me}/{spec.etag}".encode()) % max(1, len(names))
        ordered = [self.peers[n] for n in names[turn:] + names[:turn]]
        return [p for p in ordered if spec.etag in _verified(self._index(p))]

    # -- the source fetch_weights calls -------------------------------------------------
    def ready(self, spec: FileSpec) -> None:
        """Return when some peer has the file verified, else raise NotYet / UseHub."""
        if not self.holders(spec):
            self._no_holder(spec)

    def fetch(self, spec: FileSpec, part: PartialBlob) -> None:
        """Fill `part` to spec.size from peers, or raise NotYet / UseHub."""
        busy = False
        for peer in self.holders(spec):
            try:
                self._get(peer, spec, part)
                return
            except PeerBusy:
                busy = True
            except PeerError as e:
                self._down(peer, f"{spec.path}: {e}")
        if busy:
            raise NotYet()
        self._no_holder(spec)

    def _no_holder(self, spec: FileSpec) -> None:
        if self.owns(spec):
            self._own_share(spec)
        owner = self.peers.get(self.owner.get(spec.path, ""))
        if owner is None or owner.bad:
            raise UseHub(f"its owner {getattr(owner, 'name', '?')} served corrupt bytes")
        index = self._index(owner)
        if spec.etag in _verified(index):
            # holders() read an older index (another worker was refreshing it): this one lists
            # the file, so it is asked of the peers again now, not taken for "done without it".
            self._heard({spec.etag})
            raise NotYet()
        if index and protocol.download_ended(index.get("downloader")):
            raise UseHub(f"no peer has it and its owner {owner.name}'s download "
                         f"{index['downloader']} without it")
        # Any progress of the owner counts: with 16 workers it reaches a file of its share only
        # when an earlier one is done, which on a real cluster takes longer than the bound.
        progress = None if index is None else (len(_verified(index)),
                                               sum((index.get("partial") or {}).values()))
        now = time.monotonic()
        with self.lock:
            seen = self.waiting.get(owner.name)
            if seen is None or (progress is not None and progress != seen[0]):
                self.waiting[owner.name] = (progress, now)
                raise NotYet()
        if now - seen[1] > self.stall:
            what = "is unreachable" if progress is None else "made no progress"
            raise UseHub(f"no peer has it and its owner {owner.name} {what} for {self.stall:.0f}s")
        raise NotYet()

    def _own_share(self, spec: FileSpec) -> None:
        """No peer has this node's own file verified: from the Hub, but only once every peer
        has answered its index (or is known down); a worker that found another thread asking
        a peer sees no index yet, and must not send a replaced node's share to the Hub."""
        for peer in self._unheard():  # the first answers: the share starts now, not a recheck later
            self._index(peer, wait=True)
        if self._unheard() or self.holders(spec):  # an answer just heard may name a holder
            raise NotYet()
        raise UseHub("no peer has it verified (this node's own share)")

    def _unheard(self) -> list[Peer]:
        """Peers that neither answered their index yet nor are known down."""
        return [p for p in self.peers.values()
                if p.index is None and p.unreachable_since is None and not p.bad]

    def _get(self, peer: Peer, spec: FileSpec, part: PartialBlob) -> None:
        start = part.prefix  # peers send from the prefix on; ranges past it are written again
        conn, response = self._request(peer, "GET", f"/blobs/{spec.etag}",
                                       {"Range": f"bytes={start}-"} if start else None)
        try:
            expected = f"bytes {start}-{spec.size - 1}/{spec.size}"
            if response.status == 503:
                raise PeerBusy()
            if response.status != (206 if start else 200) or \
                    (start and response.getheader("Content-Range") != expected):
                raise PeerError(f"HTTP {response.status} {response.getheader('Content-Range')}")
            self._copy(peer, spec, part, response)
        except (OSError, http.client.HTTPException) as e:
            raise PeerError(f"{type(e).__name__}: {e} at byte {part.have}") from None
        finally:
            conn.close()

    def _copy(self, peer: Peer, spec: FileSpec, part: PartialBlob,
              response: http.client.HTTPResponse) -> None:
        """Receive into one buffer while the other is written and hashed (hashlib lets go of the
        GIL): on a fast private network sha256 in the receiving thread would halve the rate.
        Each buffer takes what the socket brings for at most fetch_http.FILL_SECONDS (or until
        full), so bytes reach the disk within that of arriving: a killed downloader loses at
        most its two buffers (fetch_http.fill_bytes), a cut connection nothing it delivered."""
        size = max(1, min(fetch_http.fill_bytes(spec.size, BUFFER), spec.size - part.prefix))
        views = _receive_buffers(size)
        answer = fetch_http.Answer(response)
        got, turn = part.prefix, 0
        pending: Future[None] | None = None
        with part.open() as f, \
                pool(1, "hash") as writer:
            try:
                while got < spec.size:
                    self._check(peer, part, f, pending)
                    at = place(got)
                    n = answer.fill(views[turn][at:at + min(size, spec.size - got)])
                    if not n:
                        raise PeerError(f"the response ended at byte {got}")
                    if pending:
                        pending.result()
                    pending = writer.submit(part.append, f, views[turn][at:at + n], peer.name, got)
                    got, turn = got + n, 1 - turn
            finally:
                if pending:
                    pending.result()
            part.finish(f)

    def _check(self, peer: Peer, part: PartialBlob, f: BufferedRandom, pending: Future[None] | None) -> None:
        if self.stop_event.is_set():
            raise self.stopped()
        if peer.bad:  # found out on another file meanwhile: none of its bytes are kept
            if pending:
                pending.result()
            part.restart(f)
            raise PeerError("it served corrupt bytes of another file")

    def mismatch(self, spec: FileSpec, part: PartialBlob) -> None:
        """The file failed its checksum: the peers whose bytes are in it are not used again when
        they wrote all of it; then the file comes from the Hub."""
        sources = sorted(s for s in part.sources if s in self.peers)
        if part.resumed_from == 0:
            for name in sources:
                self.peers[name].bad = True
                self.bad.add(name)
        raise UseHub(f"bytes from peer {', '.join(sources) or '?'} fail the checksum"
                     + ("; that peer is not used again in this run" if part.resumed_from == 0
                        else " (the file resumed an earlier partial)"))


def load(block: protocol.PeerBlock, stop_event: threading.Event, stopped: type[BaseException],
         log: Callable[[str], None], bad: set[str]) -> Peers:
    path = block["secret_file"]
    if os.stat(path).st_mode & 0o077:
        log(f"warning: {path} is readable by group/others; it should be 0600")
    with open(path) as fh:
        secret = fh.read().strip()
    return Peers(block, secret, stop_event, stopped, log, bad)


def _receive_buffers(size: int) -> list[memoryview]:
    """The calling thread's two buffers (for at least `size` bytes each, placed by
    direct_io.place), kept across files: a new zeroed pair per file costs a share of a
    downloader's CPU."""
    if getattr(_buffers, "size", 0) < size:
        _buffers.views, _buffers.size = [aligned(size) for _ in range(2)], size
    views: list[memoryview] = _buffers.views
    return views


def _verified(index: protocol.PeerIndex | None) -> list[str]:
    """The etags a peer's index lists verified (none when it has no index, or lists none)."""
    return (index.get("verified") if index else None) or []

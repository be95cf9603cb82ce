"""The download as the node reports it: remote/weights_status.py's document (how much of the
pinned snapshot is verified, whether the downloader runs, the peer server's state), with the
downloader's own progress document (remote/fetch_progress.py) inside it.

The records hold what the laptop reads of them. The parser takes a missing key as its
starting value: a downloader of the same schema version left running by an older k3deploy
may lack a newer counter, and a look must not fail over a counter."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from k3deploy.facts.lastjson import last_json_line
from k3deploy.remote.protocol import Reading


@dataclass(frozen=True)
class DiskFault:
    """The node's disk refused a write (fetch_base.DiskFault.document())."""
    path: str
    reason: str
    needed: int | None   # bytes still to write, when the downloader knew
    free: int | None


@dataclass(frozen=True)
class Progress:
    """The downloader's progress: this run's bytes, where they came from, how it ended."""
    error: str | None
    bytes_total: int
    bytes_done: int
    shards_total: int
    shards_done: int
    hub_bytes: int
    peer_bytes: int
    bad_peers: tuple[str, ...]   # peers whose bytes failed a checksum
    transient: bool              # ended of the Hub's retry budget alone: worth a restart
    disk: DiskFault | None


@dataclass(frozen=True)
class PeerServer:
    """The node's peer server: running, and the sha256 of the manifest and secret it read."""
    running: bool
    manifest_sha256: str | None
    secret_sha256: str | None


@dataclass(frozen=True)
class WeightsStatus:
    total: int               # files in the manifest
    missing_count: int       # of them not verified and linked
    partial_bytes: int       # bytes in the missing files' partials
    verified_bytes: int
    running: bool            # the downloader's process lives
    progress: Progress | None   # None before the first start, or of another schema version
    peer: PeerServer | None = None   # asked only with fan-out on
    # the progress document's reading (protocol.read_document: what `status` shows too);
    # None from a node program of an older k3deploy
    downloader: Reading | None = None

    @property
    def complete(self) -> bool:
        return self.missing_count == 0


@dataclass(frozen=True)
class Unreadable:
    """weights_status.py printed no document (python3 missing, a traceback): what it said."""
    output: str
    code: int


def parse_status(out: str, code: int) -> WeightsStatus | Unreadable:
    """weights_status.py's last line: the node's status document."""
    doc = last_json_line(out)
    try:
        return status(doc) if isinstance(doc, dict) else Unreadable(out, code)
    except (KeyError, AttributeError):   # another program's JSON
        return Unreadable(out, code)


def status(doc: Mapping) -> WeightsStatus:
    """The status document weights_status.py prints."""
    peer = doc.get("peer")
    return WeightsStatus(total=doc["total"], missing_count=doc["missing_count"],
                         partial_bytes=doc.get("partial_bytes", 0),
                         verified_bytes=doc.get("verified_bytes", 0), running=bool(doc["running"]),
                         progress=progress(doc["progress"]) if doc.get("progress") else None,
                         peer=PeerServer(bool(peer.get("running")), peer.get("manifest_sha256"),
                                         peer.get("secret_sha256")) if peer else None,
                         downloader=Reading.from_document(doc["downloader"])
                         if isinstance(doc.get("downloader"), Mapping) else None)


def progress(doc: Mapping) -> Progress:
    """The downloader's progress document (fetch_progress.Progress.document())."""
    disk = doc.get("disk")
    return Progress(error=doc.get("error"), bytes_total=doc.get("bytes_total", 0),
                    bytes_done=doc.get("bytes_done", 0), shards_total=doc.get("shards_total", 0),
                    shards_done=doc.get("shards_done", 0), hub_bytes=doc.get("hub_bytes", 0),
                    peer_bytes=doc.get("peer_bytes", 0),
                    bad_peers=tuple(doc.get("bad_peers") or ()),
                    transient=bool(doc.get("transient")),
                    disk=DiskFault(str(disk.get("path")), str(disk.get("reason")), disk.get("needed"),
                                   disk.get("free")) if disk else None)



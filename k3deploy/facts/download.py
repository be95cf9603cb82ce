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
from k3deploy.remote.protocol import JSON, Reading


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
    except (KeyError, _Foreign):   # another program's JSON
        return Unreadable(out, code)


class _Foreign(ValueError):
    """A value of the document is not of the type weights_status.py writes there."""


def _int(doc: Mapping[str, JSON], key: str, start: int | None = None) -> int:
    """A count: `start` when the key is missing (None: the key is required, KeyError)."""
    value = doc[key] if start is None else doc.get(key, start)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise _Foreign(f"{key}: {value!r}")


def _maybe_int(value: JSON) -> int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise _Foreign(repr(value))


def _maybe_str(value: JSON) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise _Foreign(repr(value))


def _object(value: JSON) -> dict[str, JSON]:
    if isinstance(value, dict):
        return value
    raise _Foreign(repr(value))


def status(doc: Mapping[str, JSON]) -> WeightsStatus:
    """The status document weights_status.py prints."""
    peer = doc.get("peer")
    peer_doc = _object(peer) if peer else None
    downloader = doc.get("downloader")
    return WeightsStatus(total=_int(doc, "total"), missing_count=_int(doc, "missing_count"),
                         partial_bytes=_int(doc, "partial_bytes", 0),
                         verified_bytes=_int(doc, "verified_bytes", 0), running=bool(doc["running"]),
                         progress=progress(_object(doc["progress"])) if doc.get("progress") else None,
                         peer=PeerServer(bool(peer_doc.get("running")),
                                         _maybe_str(peer_doc.get("manifest_sha256")),
                                         _maybe_str(peer_doc.get("secret_sha256")))
                         if peer_doc is not None else None,
                         downloader=Reading.from_document(downloader)
                         if isinstance(downloader, dict) else None)


def progress(doc: Mapping[str, JSON]) -> Progress:
    """The downloader's progress document (fetch_progress.Progress.document())."""
    disk = doc.get("disk")
    disk_doc = _object(disk) if disk else None
    bad_peers = doc.get("bad_peers") or []
    return Progress(error=_maybe_str(doc.get("error")), bytes_total=_int(doc, "bytes_total", 0),
                    bytes_done=_int(doc, "bytes_done", 0), shards_total=_int(doc, "shards_total", 0),
                    shards_done=_int(doc, "shards_done", 0), hub_bytes=_int(doc, "hub_bytes", 0),
                    peer_bytes=_int(doc, "peer_bytes", 0),
                    bad_peers=tuple(str(p) for p in bad_peers) if isinstance(bad_peers, list) else (),
                    transient=bool(doc.get("transient")),
                    disk=DiskFault(str(disk_doc.get("path")), str(disk_doc.get("reason")),
                                   _maybe_int(disk_doc.get("needed")), _maybe_int(disk_doc.get("free")))
                    if disk_doc is not None else None)

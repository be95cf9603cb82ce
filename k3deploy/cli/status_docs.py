"""What `status` shows of the documents a k3deploy process on a node rewrites while it works
(the downloader's progress, the guard's state), from their one reading (remote/protocol.py
Reading; the download step reads the same through remote/weights_status.py). A document whose
writer died says it still works: it reads as stopped, with when and how it was last seen."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from k3deploy.core.jsonvalue import JSON
from k3deploy.remote import protocol
from k3deploy.remote.protocol import Reading

if TYPE_CHECKING:
    from k3deploy.cli.status_doc import NodeDoc


def at(epoch: float | None) -> str | None:
    """A node's clock reading as ISO 8601, UTC."""
    return None if epoch is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def number(value: JSON) -> float:
    """A counter of a node's document; 0 when it is missing or not a number."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def percent(doc: Mapping[str, JSON]) -> float:
    return 100 * number(doc.get("bytes_done")) / max(1, number(doc.get("bytes_total")) or 1)


def last_seen(seen: Reading) -> dict[str, JSON]:
    """When the writer last wrote (the node's clock, and how long before the look on that same
    clock) and what its document said then."""
    doc = seen.doc or {}
    return {"at": at(seen.written),
            "seconds_ago": None if seen.age is None else round(seen.age),
            "state": seen.said, "percent": round(percent(doc), 1) if doc else None}


def download_view(seen: Reading) -> dict[str, JSON] | None:
    """status --json's download of a node: the progress document's counters, the state of its
    reading (running, done, failed, stopped, starting, unreadable) and whether the downloader
    lives; a stopped or unreadable one says when and how it was last seen. None: no download
    ever started there."""
    if seen.state is None:
        return None
    view: dict[str, JSON] = {**(seen.doc or {}), "state": seen.state, "writer_alive": seen.alive}
    if seen.state in (protocol.STOPPED, protocol.UNREADABLE):
        view["last_seen"] = last_seen(seen)
    if seen.error:
        view["read_error"] = seen.error
    return view


def stopped_lines(nodes: dict[str, NodeDoc]) -> list[str]:
    """One line per node whose download stopped without its end: when, at how much."""
    lines = []
    for name, info in nodes.items():
        doc = (info["live"].get("download") or {})
        if doc.get("state") != protocol.STOPPED:
            continue
        seen = doc.get("last_seen")
        seen = seen if isinstance(seen, dict) else {}
        ago = "" if seen.get("seconds_ago") is None else f" ({seen['seconds_ago']}s before this look)"
        lines.append(f"{name}: download stopped at {number(seen.get('percent')):.0f}%: its downloader "
                     f"is gone, last seen {seen.get('state')} at {seen.get('at')}{ago}; "
                     "`k3deploy up` resumes it")
    return lines

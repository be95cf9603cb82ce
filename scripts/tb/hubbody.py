"""File bodies for the mock Hub and its CDN: Range parsing, the byte loop with the per-connection
rate, the node's link (--node-rate, shared by Hub and CDN) and the drop-after/corrupt faults."""
from __future__ import annotations

import contextlib
import re
import time
from typing import TYPE_CHECKING

from tb import hubrepo
from tb.hubfiles import read_json

if TYPE_CHECKING:
    from tb.hub import Hub
    from tb.hubfiles import Counters

_FLIP = bytes(b ^ 0xFF for b in range(256))
_RANGE = re.compile(r"^\s*bytes\s*=\s*(\d+)\s*-\s*(\d*)\s*$")


def byte_range(header: str | None, size: int) -> tuple[int, int, bool] | None:
    """(start, end inclusive, ranged) for a Range header; None when it cannot be satisfied."""
    match = _RANGE.match(header or "")
    if not match:
        return 0, size - 1, False
    start = int(match.group(1))
    end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
    if start >= size or start > end:
        return None
    return start, end, True


def range_headers(f: hubrepo.RepoFile, start: int, end: int, ranged: bool) -> dict:
    headers = {"Content-Type": "application/octet-stream", "Content-Length": str(end - start + 1),
               "Accept-Ranges": "bytes"}
    if ranged:
        headers["Content-Range"] = f"bytes {start}-{end}/{f.size}"
    return headers


def send_file(handler, hub: Hub, counters: Counters, f: hubrepo.RepoFile, start: int, stop: int,
              rate: int) -> None:
    """Write f[start:stop] to the handler's connection at `rate` bytes/s (0: unthrottled) and
    the node's link. Bytes are counted in `counters` (the Hub's or the CDN's)."""
    faults, ip = read_json(hub.dir / "faults.json", {}), handler.client_address[0]
    drop_after = faults.get("drop_after")
    cut = stop if drop_after is None else min(stop, start + max(int(drop_after), 0))
    corrupt_from = f.size // 2 if faults.get("corrupt") == f.path else None
    counters.file_bytes(ip, f.path, 0, new_get=True)
    link = hub.link(ip)
    with link.sending() if link else contextlib.nullcontext():
        _send(handler, hub, counters, f, (start, stop, cut), rate, link, corrupt_from)


def _chunk(rate: int, link) -> int:
    """A write per tenth of a second of the connection's rate or of its share of the node's
    link, whichever is less, at least 4 KiB. TCP shares a link among its flows packet by
    packet: 96 connections on a 600 kB/s link each get a steady ~6 kB/s, not a 60 kB burst
    every 10 s (which a downloader rightly takes for a stalled connection)."""
    # Pacing is the simulation's cost, not the CDN's: smaller writes (a real 8.7 MB/s edge
    # fills httpcore's 64 KiB reads: READ_NUM_BYTES in httpcore/_sync/http11.py of httpcore
    # 1.0.9 and httpcore2 2.16.2) cost the mock and the downloaders reading it CPU that every
    # node of a 2-core testbed waits for.
    rates = [r for r in (rate, link.share() if link else 0) if r]
    return max(4096, min(65536, min(rates) // 10)) if rates else 256 * 1024


def _send(handler, hub: Hub, counters: Counters, f: hubrepo.RepoFile, span: tuple[int, int, int],
          rate: int, link, corrupt_from: int | None) -> None:
    start, stop, cut = span
    ip = handler.client_address[0]
    began, sent, pos = time.monotonic(), 0, start
    with open(hub.repo.local_path(f.path), "rb") as src:
        src.seek(start)
        while pos < cut:
            data = src.read(min(_chunk(rate, link), cut - pos))
            if corrupt_from is not None and pos + len(data) > corrupt_from:
                keep = max(corrupt_from - pos, 0)
                data = data[:keep] + data[keep:].translate(_FLIP)
            _pace(link, rate, began, sent, len(data))
            last = pos + len(data) >= cut
            if last:  # count and publish before the client can see the end of the body
                counters.file_bytes(ip, f.path, len(data))
                hub.stats.flush()
            try:
                handler.wfile.write(data)
            except OSError:
                if last:
                    counters.file_bytes(ip, f.path, -len(data))
                handler.close_connection = True
                return
            if not last:
                counters.file_bytes(ip, f.path, len(data))
            pos, sent = pos + len(data), sent + len(data)
    if cut < stop:  # the drop-after fault: hang up mid-body
        handler.close_connection = True


def _pace(link, rate: int, began: float, sent: int, n: int) -> None:
    """Hold the next n bytes (after `sent` since `began`) until the node's link and the
    connection's rate have carried them: a body's last write, like its first, arrives no
    sooner than its share of the rate allows."""
    if link:
        link.take(n)
    if rate:
        time.sleep(max(0.0, began + (sent + n) / rate - time.monotonic()))

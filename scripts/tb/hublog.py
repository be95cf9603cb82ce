"""The mock Hub's request log: HUBDIR/requests.jsonl, one line per answer of the Hub or its CDN,
the evidence for what a client did when (e.g. that nothing was sent before the `t` a 429 gave).

A line: {"host": "hub"|"cdn", "node", "method", "path" (no query: a signed URL's is long),
"status", "arrived" (epoch s, when the request line was read), "answered" (epoch s, when the
answer's headers went out), "ratelimit_t" / "retry_after" (what a RateLimit or Retry-After
header told the client, when sent), "authorized" (an Authorization header came with it)}.
"""
from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

_T = re.compile(r";\s*t\s*=\s*(\d+)")


class RequestLog:
    """Appends lines to HUBDIR/requests.jsonl (one lock: lines never interleave)."""

    def __init__(self, hub_dir: Path):
        self.path, self.lock = Path(hub_dir) / "requests.jsonl", threading.Lock()
        self.path.unlink(missing_ok=True)  # one log per serving process

    def write(self, entry: dict) -> None:
        line = json.dumps(entry, separators=(",", ":")) + "\n"
        with self.lock, open(self.path, "a") as fh:
            fh.write(line)


class LoggedHandler:
    """Mixin for a BaseHTTPRequestHandler with `hub` (a tb.hub.Hub) and `log_host`."""

    log_host = "hub"

    def parse_request(self):
        self.k3_arrived, self.k3_entry = time.time(), None
        return super().parse_request()

    def send_response(self, code, message=None):
        self.k3_entry = {"host": self.log_host, "node": self.hub.stats.node_name(self.client_address[0]),
                         "method": self.command, "path": (self.path or "").split("?", 1)[0], "status": int(code),
                         "arrived": round(getattr(self, "k3_arrived", time.time()), 4),
                         "authorized": bool(self.headers.get("Authorization"))}
        super().send_response(code, message)

    def send_header(self, keyword, value):
        if getattr(self, "k3_entry", None) is not None:
            key = keyword.lower()
            if key == "ratelimit" and (match := _T.search(str(value))):
                self.k3_entry["ratelimit_t"] = int(match.group(1))
            elif key == "retry-after":
                self.k3_entry["retry_after"] = str(value)
        super().send_header(keyword, value)

    def end_headers(self):
        super().end_headers()
        entry, self.k3_entry = getattr(self, "k3_entry", None), None
        if entry is not None:
            entry["answered"] = round(time.time(), 4)
            self.hub.requests.write(entry)


def after_429(log: list[dict], node: str, host: str, in_flight: float) -> dict:
    """One node's requests to one host, from the request log, against each 429 that said `t`:
    the gaps (s after the 429) of those that arrived before answered + t (`early`; apart from
    those `under_way`, within `in_flight` s of it: sent before the client could have read it),
    and how soon after answered + t the first later one came (`first_after_t_s_min`)."""
    mine = sorted((r for r in log if r["node"] == node and r["host"] == host), key=lambda r: r["arrived"])
    told = [r for r in mine if r["status"] == 429 and r.get("ratelimit_t") is not None]
    early, under_way, margins = [], [], []
    for limit in told:
        until = limit["answered"] + limit["ratelimit_t"]
        for r in mine:
            gap = r["arrived"] - limit["answered"]
            if 0 < gap and r["arrived"] < until:
                (under_way if gap <= in_flight else early).append(round(gap, 3))
        later = [r["arrived"] - until for r in mine if r["arrived"] >= until]
        if later:
            margins.append(round(min(later), 3))
    return {"answered_429": len(told), "t_told": sorted({r["ratelimit_t"] for r in told}),
            "early": early, "under_way_s": sorted(under_way)[-3:], "under_way": len(under_way),
            "first_after_t_s_min": min(margins) if margins else None}


def rounds(log: list[dict], node: str, host: str, since: float, until: float, gap: float = 2.0) -> dict:
    """One node's requests to one host that arrived in [since, until) (e.g. an outage), cut into
    rounds wherever `gap` s passed without one: how many requests each backoff round sent."""
    arrived = sorted(r["arrived"] for r in log if r["node"] == node and r["host"] == host
                     and since <= r["arrived"] < until)
    sizes: list[int] = []
    for i, at in enumerate(arrived):
        if i == 0 or at - arrived[i - 1] > gap:
            sizes.append(0)
        sizes[-1] += 1
    return {"requests": len(arrived), "rounds": len(sizes), "per_round": sizes,
            "max_per_round": max(sizes, default=0)}

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

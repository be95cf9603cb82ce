"""The mock Hub's faults: faults.json (written by `testbed fault`, re-read on every request) and
what the serving process keeps about them (how much of a quota or a forbid count is used).

Faults combine; heal clears them all.
  drop_after: BYTES           every body is cut after BYTES and the connection hung up
  corrupt: FILE               the second half of FILE is served with every bit flipped
  outage: {until, status}     every Hub and CDN request answers `status` until `until` (epoch s)
  rate_limit: {quota, window, since}
                              /resolve requests over `quota` in a fixed window of `window` s
                              (windows counted from `since`) answer 429; counted per token, or
                              per client address without one, as the real Hub counts per user
                              or per IP (hub-docs docs/hub/rate-limits.md)
  cdn_forbid: {count, id}     the next `count` CDN requests answer 403
The 429's headers are the real Hub's (hub-docs docs/hub/rate-limits.md; huggingface_hub 2.4.0
utils/_http.py parse_ratelimit_headers and its tests, tests/test_utils_http.py
TestParseRatelimitHeaders @ ee0a4510f4bc): `RateLimit: "resolvers";r=<left>;t=<s to reset>` and
`RateLimit-Policy: "fixed window";"resolvers";q=<quota>;w=<window>`, sent on every /resolve answer
while the limit is on (the client reads them only when r=0)."""
from __future__ import annotations

import math
import threading
import time
from pathlib import Path

from tb.hubfiles import read_json, write_json_atomic

ACTIONS = ("drop-after", "corrupt", "outage", "rate-limit", "cdn-forbid", "heal")


def _set(faults: dict, action: str, args: list) -> None:
    now = time.time()
    if action == "drop-after":
        faults["drop_after"] = int(args[0])
    elif action == "corrupt":
        faults["corrupt"] = str(args[0])
    elif action == "outage":
        status = int(args[1]) if len(args) > 1 and args[1] is not None else 503
        faults["outage"] = {"until": now + float(args[0]), "status": status}
    elif action == "rate-limit":
        faults["rate_limit"] = {"quota": int(args[0]), "window": int(args[1]), "since": now}
    elif action == "cdn-forbid":
        faults["cdn_forbid"] = {"count": int(args[0]), "id": time.time_ns()}
    else:
        raise ValueError(f"unknown hub fault {action!r} ({', '.join(ACTIONS)})")


def write_fault(hub_dir, action: str, *args) -> dict:
    """Set a fault (heal clears all) in HUBDIR/faults.json; returns the faults now set."""
    path = Path(hub_dir) / "faults.json"
    faults = read_json(path, {})
    if action == "heal":
        faults = {}
    else:
        _set(faults, action, list(args))
    write_json_atomic(path, faults)
    return faults


class LiveFaults:
    """The serving side: reads faults.json per request, counts what a fault has used up."""

    def __init__(self, hub_dir: Path):
        self.path, self.lock = Path(hub_dir) / "faults.json", threading.Lock()
        self.windows: dict[str, tuple[tuple, int]] = {}  # who -> (window key, requests in it)
        self.forbid_id, self.forbid_used = None, 0

    def current(self) -> dict:
        return read_json(self.path, {})

    def outage(self, faults: dict) -> int | None:
        outage = faults.get("outage")
        if outage and time.time() < float(outage["until"]):
            return int(outage["status"])
        return None

    def resolve_quota(self, faults: dict, who: str) -> tuple[bool, dict]:
        """(allowed, RateLimit headers) for one more /resolve request of `who` (a token or an
        address)."""
        limit = faults.get("rate_limit")
        if not limit:
            return True, {}
        quota, window, since = int(limit["quota"]), int(limit["window"]), float(limit["since"])
        elapsed = max(0.0, time.time() - since)
        index = int(elapsed // window)
        with self.lock:
            key, used = self.windows.get(who, (None, 0))
            used = used + 1 if key == (since, index) else 1
            self.windows[who] = ((since, index), used)
        reset = max(1, math.ceil(since + (index + 1) * window - time.time()))
        headers = {"RateLimit": f'"resolvers";r={max(0, quota - used)};t={reset}',
                   "RateLimit-Policy": f'"fixed window";"resolvers";q={quota};w={window}'}
        return used <= quota, headers

    def cdn_forbidden(self, faults: dict) -> bool:
        """True for each of the next `count` CDN requests after a cdn-forbid."""
        forbid = faults.get("cdn_forbid")
        if not forbid:
            return False
        with self.lock:
            if self.forbid_id != forbid["id"]:
                self.forbid_id, self.forbid_used = forbid["id"], 0
            if self.forbid_used >= int(forbid["count"]):
                return False
            self.forbid_used += 1
            return True

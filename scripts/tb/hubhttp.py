"""The mock Hub's HTTP side: routing, the repo checks and errors huggingface_hub expects, and
file bodies with Range, rate limits and the faults of faults.json (see hub.py)."""
from __future__ import annotations

import json
import re
import time
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, unquote, urlsplit

from tb import hubrepo
from tb.hubfiles import read_json

if TYPE_CHECKING:
    from tb.hub import Hub

_FLIP = bytes(b ^ 0xFF for b in range(256))
_RANGE = re.compile(r"^\s*bytes\s*=\s*(\d+)\s*-\s*(\d*)\s*$")


class HubHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 300  # idle keep-alive connections must not pin a thread forever
    server_version = "k3tb-mock-hub/1"
    hub: Hub  # set on the subclass made per server

    def log_message(self, fmt, *args):  # request lines would flood the testbed log
        pass

    def do_GET(self):
        self._route(send_body=True)

    def do_HEAD(self):
        self._route(send_body=False)

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self._route(send_body=True)

    def _route(self, send_body: bool) -> None:
        auth = self.headers.get("Authorization") or ""
        self.hub.stats.request(self.client_address[0], auth.startswith("Bearer "))
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.split("/") if p]
        if parts[:2] == ["api", "agent-harnesses"]:
            return self._error(404, None, "Not Found")
        if parts[:2] == ["api", "models"]:
            return self._api(parts[2:], parse_qs(url.query), auth)
        if len(parts) >= 5 and parts[2] == "resolve":
            return self._resolve(parts, auth, send_body and self.command == "GET")
        if parts[:1] == ["api"] or (len(parts) >= 3 and parts[2] == "resolve"):
            return self._error(404, "RepoNotFound", "Repository not found")
        return self._error(404, None, "Not Found")

    def _check_repo(self, repo_id: str, rev: str | None, auth: str) -> bool:
        hub = self.hub
        if repo_id != hub.repo.repo_id:
            self._error(404, "RepoNotFound", "Repository not found")
        elif hub.token is not None and auth != f"Bearer {hub.token}":
            if auth.startswith("Bearer "):
                self._error(401, None, "Invalid credentials in Authorization header")
            else:
                self._error(401, "GatedRepo", f"Access to model {repo_id} is restricted. You must have access "
                                              "to it and be authenticated to access it. Please log in.")
        elif rev is not None and rev not in ("main", hub.repo.sha):
            self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        else:
            return True
        return False

    def _api(self, parts: list[str], query: dict, auth: str) -> None:
        repo_id, rest = "/".join(parts[:2]), parts[2:]
        rev = rest[1] if len(rest) >= 2 and rest[0] in ("revision", "tree") else None
        if not self._check_repo(repo_id, rev, auth):
            return
        if not rest or (rest[0] == "revision" and len(rest) == 2):
            blobs = query.get("blobs", ["false"])[0].lower() in ("1", "true")
            return self._json(hubrepo.model_info(self.hub.repo, blobs, gated=self.hub.token is not None))
        if rest[0] == "tree" and len(rest) >= 2:
            under = "/".join(rest[2:])
            entries = [e for e in hubrepo.tree_entries(self.hub.repo) if not under or e["path"].startswith(under + "/")]
            if under and not entries:
                return self._error(404, "EntryNotFound", f"{under} does not exist on \"{rev}\"")
            return self._json(entries)
        self._error(404, None, "Not Found")

    def _resolve(self, parts: list[str], auth: str, send_body: bool) -> None:
        repo_id, rev, path = "/".join(parts[:2]), parts[3], "/".join(parts[4:])
        if not self._check_repo(repo_id, rev, auth):
            return
        hub = self.hub
        f = hub.repo.file(path)
        if f is None:
            return self._error(404, "EntryNotFound", f"{path} does not exist on \"{rev}\"",
                               {"X-Repo-Commit": hub.repo.sha})
        start, end = 0, f.size - 1
        match = _RANGE.match(self.headers.get("Range") or "")
        if match:
            start = int(match.group(1))
            end = min(int(match.group(2)), f.size - 1) if match.group(2) else f.size - 1
            if start >= f.size or start > end:
                return self._error(416, None, "Range Not Satisfiable", {"Content-Range": f"bytes */{f.size}"})
        self.send_response(206 if match else 200)
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(end - start + 1),
                   "Accept-Ranges": "bytes", "X-Repo-Commit": hub.repo.sha, "ETag": f'"{f.etag}"'}
        if f.is_lfs:
            headers.update({"X-Linked-Etag": f'"{f.sha256}"', "X-Linked-Size": str(f.size)})
        if match:
            headers["Content-Range"] = f"bytes {start}-{end}/{f.size}"
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if send_body:
            self._send_file(f, start, end + 1)

    def _send_file(self, f: hubrepo.RepoFile, start: int, stop: int) -> None:
        faults, hub, ip = read_json(self.hub.dir / "faults.json", {}), self.hub, self.client_address[0]
        drop_after = faults.get("drop_after")
        cut = stop if drop_after is None else min(stop, start + max(int(drop_after), 0))
        corrupt_from = f.size // 2 if faults.get("corrupt") == f.path else None
        hub.stats.file_bytes(ip, f.path, 0, new_get=True)
        rates = [r for r in (hub.rate, hub.node_rate) if r]
        chunk = max(1024, min(65536, min(rates) // 20)) if rates else 256 * 1024
        link = hub.link(ip)
        began, sent, pos = time.monotonic(), 0, start
        with open(hub.repo.local_path(f.path), "rb") as src:
            src.seek(start)
            while pos < cut:
                data = src.read(min(chunk, cut - pos))
                if corrupt_from is not None and pos + len(data) > corrupt_from:
                    keep = max(corrupt_from - pos, 0)
                    data = data[:keep] + data[keep:].translate(_FLIP)
                last = pos + len(data) >= cut
                if last:  # count and publish before the client can see the end of the body
                    hub.stats.file_bytes(ip, f.path, len(data))
                    hub.stats.flush()
                try:
                    self.wfile.write(data)
                except OSError:
                    if last:
                        hub.stats.file_bytes(ip, f.path, -len(data))
                    self.close_connection = True
                    return
                if not last:
                    hub.stats.file_bytes(ip, f.path, len(data))
                pos, sent = pos + len(data), sent + len(data)
                if link:
                    link.take(len(data))
                if hub.rate:
                    time.sleep(max(0.0, began + sent / hub.rate - time.monotonic()))
        if cut < stop:  # the drop-after fault: hang up mid-body
            self.close_connection = True

    def _json(self, doc) -> None:
        body = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: int, code: str | None, message: str, extra: dict | None = None) -> None:
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        if code:
            self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

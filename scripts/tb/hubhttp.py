"""The mock Hub's HTTP side: routing, the repo checks and errors huggingface_hub expects, the
gate, the redirect of LFS files to the CDN (hubcdn.py) and the faults of faults.json (hubfaults.py).

The gate (`gated`, --hub-gated) is the real one: model info and the tree are public, only
/resolve refuses. Without a token: 401, `X-Error-Code: GatedRepo`, "Access to model R is
restricted. You must have access to it and be authenticated to access it. Please log in."
(published in ToTheBeginning/PuLID#97 and Aratako/T5Gemma-TTS#6); with a token not granted: 403
GatedRepo, "Access to model R is restricted and you are not in the authorized list. Visit
https://huggingface.co/R to ask for access." (huggingface_hub tests/test_file_download.py
@ ee0a4510f4bc; ariG23498/gemma3-object-detection#5); with a fine-grained token of a granted
account that lacks gated-repo read access (`TOKEN fine-grained-no-gated` in the token file): a
plain 403 without X-Error-Code (_NO_GATED_PERMISSION below). Without `gated`, a token list makes the
whole repo private-like (every request needs a granted token).

With the CDN on, /resolve of an LFS file answers 302 with Location (a signed CDN URL),
X-Repo-Commit, X-Linked-Etag, X-Linked-Size and Accept-Ranges: huggingface_hub 2.4.0
get_hf_file_metadata stops at the first off-Hub redirect and reads them there
(utils/_http.py _httpx2_follow_hub_redirects_with_backoff). The real 302 is text/plain with a
short body (ngxson/wllama#248 shows `content-type: text/plain; charset=utf-8`, a nonzero
length). Its text, "<reason>. Redirecting to <Location>", is the Hub's own for a 307 in
containers/podman-desktop-extension-ai-lab#1651 (2024-09: "Temporary Redirect. Redirecting to
/ibm-granite/...", text/plain, x-powered-by huggingface-moon); for the 302 it is that pattern
with 302's reason, "Found" (no 302 body was found published; clients never read it). The 503 of
an outage has no published body either: its JSON `error` is generic. Small (git) files answer
directly."""
from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, unquote, urlsplit

from tb import hubbody, hubrepo
from tb.hublog import LoggedHandler

if TYPE_CHECKING:
    from tb.hub import Hub

_NO_TOKEN = ("Access to model {repo} is restricted. You must have access to it and be authenticated "
             "to access it. Please log in.")
# A fine-grained token without "Read access to contents of all public gated repos you can
# access" gets a plain 403, no GatedRepo code, so huggingface_hub raises a bare HfHubHTTPError
# ("403 Forbidden: <X-Error-Message>. ... Make sure your token has the correct permissions.",
# utils/_http.py hf_raise_for_status, the 403 branch, 2.4.0) and not GatedRepoError. The cause:
# huggingface/huggingface_hub#2844 (a granted account's token refused with a plain 403; the
# maintainer names that checkbox). The message: a published plain 403 of /resolve on a gated
# repo whose access was granted, "403 Forbidden: Authorization error.." (meta-llama/llama3#189,
# 2024-05; the client appends the second '.'). Whether that reporter's token was fine-grained
# is not said there.
_NO_GATED_PERMISSION = "Authorization error."
_NOT_GRANTED = ("Access to model {repo} is restricted and you are not in the authorized list. "
                "Visit https://huggingface.co/{repo} to ask for access.")


def _rate_limited(limit: dict) -> str:
    """The 429's message. Published for the API limit (huggingface_hub prints it from the answer,
    alan-turing-institute/t0-1#169, 2026-02): "We had to rate limit you, you hit the quota of 1000
    api requests per 5 minutes period. Upgrade to a PRO user or Team/Enterprise organization
    account (https://hf.co/pricing) to get higher limits. See
    https://huggingface.co/docs/hub/rate-limits". The resolvers' wording was not found; this is
    that text with "resolvers" for "api" (an assumption) and the fault's quota and window."""
    window = int(limit["window"])
    period = f"{window // 60} minutes" if window % 60 == 0 else f"{window} seconds"
    return (f"We had to rate limit you, you hit the quota of {int(limit['quota'])} resolvers requests "
            f"per {period} period. Upgrade to a PRO user or Team/Enterprise organization account "
            "(https://hf.co/pricing) to get higher limits. See https://huggingface.co/docs/hub/rate-limits")


class HubHandler(LoggedHandler, BaseHTTPRequestHandler):
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
        self.faults = self.hub.faults.current()
        status = self.hub.faults.outage(self.faults)
        if status is not None:
            return self._error(status, None, "Service Unavailable")
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

    def _check_repo(self, repo_id: str, rev: str | None, auth: str, resolve: bool = False) -> bool:
        hub = self.hub
        if repo_id != hub.repo.repo_id:
            self._error(404, "RepoNotFound", "Repository not found")
        elif (resolve or not hub.gated) and not self._granted(repo_id, auth):
            pass  # answered
        elif rev is not None and rev not in ("main", hub.repo.sha):
            self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        else:
            return True
        return False

    def _granted(self, repo_id: str, auth: str) -> bool:
        """The token check: the real gate's answers when gated, else a private repo's."""
        tokens = self.hub.tokens
        if not self.hub.gated and tokens is None:
            return True
        token = auth[len("Bearer "):] if auth.startswith("Bearer ") else None
        if token is not None and self.hub.gated and token in self.hub.no_gated:
            self._error(403, None, _NO_GATED_PERMISSION)
            return False
        if token is not None and token in (tokens or ()):
            return True
        if token is None:
            self._error(401, "GatedRepo", _NO_TOKEN.format(repo=repo_id))
        elif self.hub.gated:
            self._error(403, "GatedRepo", _NOT_GRANTED.format(repo=repo_id))
        else:
            self._error(401, None, "Invalid credentials in Authorization header")
        return False

    def _api(self, parts: list[str], query: dict, auth: str) -> None:
        repo_id, rest = "/".join(parts[:2]), parts[2:]
        rev = rest[1] if len(rest) >= 2 and rest[0] in ("revision", "tree") else None
        if not self._check_repo(repo_id, rev, auth):
            return
        if not rest or (rest[0] == "revision" and len(rest) == 2):
            blobs = query.get("blobs", ["false"])[0].lower() in ("1", "true")
            return self._json(hubrepo.model_info(self.hub.repo, blobs,
                                                  gated=self.hub.gated or self.hub.tokens is not None))
        if rest[0] == "tree" and len(rest) >= 2:
            under = "/".join(rest[2:])
            entries = [e for e in hubrepo.tree_entries(self.hub.repo) if not under or e["path"].startswith(under + "/")]
            if under and not entries:
                return self._error(404, "EntryNotFound", f"{under} does not exist on \"{rev}\"")
            return self._json(entries)
        self._error(404, None, "Not Found")

    def _resolve(self, parts: list[str], auth: str, send_body: bool) -> None:
        repo_id, rev, path = "/".join(parts[:2]), parts[3], "/".join(parts[4:])
        who = auth if auth.startswith("Bearer ") else self.client_address[0]
        allowed, limit_headers = self.hub.faults.resolve_quota(self.faults, who)
        if not allowed:
            return self._error(429, None, _rate_limited(self.faults["rate_limit"]), limit_headers)
        if not self._check_repo(repo_id, rev, auth, resolve=True):
            return
        hub = self.hub
        f = hub.repo.file(path)
        if f is None:
            return self._error(404, "EntryNotFound", f"{path} does not exist on \"{rev}\"",
                               {"X-Repo-Commit": hub.repo.sha})
        meta = {"X-Repo-Commit": hub.repo.sha, **limit_headers}
        if f.is_lfs:
            meta.update({"X-Linked-Etag": f'"{f.sha256}"', "X-Linked-Size": str(f.size)})
            if hub.cdn_url:
                return self._redirect(f, meta)
        span = hubbody.byte_range(self.headers.get("Range"), f.size)
        if span is None:
            return self._error(416, None, "Range Not Satisfiable", {"Content-Range": f"bytes */{f.size}"})
        start, end, ranged = span
        self.send_response(206 if ranged else 200)
        headers = {**hubbody.range_headers(f, start, end, ranged), "ETag": f'"{f.etag}"', **meta}
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if send_body:
            hubbody.send_file(self, hub, hub.stats.hub, f, start, end + 1, hub.rate)

    def _redirect(self, f: hubrepo.RepoFile, meta: dict) -> None:
        location = self.hub.signer.url(self.hub.cdn_url, self.hub.repo.repo_id, f.sha256, f.path)
        body = f"Found. Redirecting to {location}".encode()
        self.send_response(302)
        for key, value in {"Content-Type": "text/plain; charset=utf-8", "Content-Length": str(len(body)),
                           "Location": location, "Accept-Ranges": "bytes", **meta}.items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

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

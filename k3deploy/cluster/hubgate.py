"""The Hub's gate, asked from the laptop before any node is touched, and where downloads go.

On the real Hub the model info and the file tree of a gated repo are public; only /resolve
refuses: 401 without a token, 403 (`X-Error-Code: GatedRepo`) for a token whose account was not
granted access, a plain 403 (no GatedRepo code: huggingface_hub raises a bare HfHubHTTPError, not
GatedRepoError, utils/_http.py hf_raise_for_status@2.4.0) for a fine-grained token without read
access to public gated repos (huggingface/huggingface_hub#2844; reference/hf-hub-notes.md). So the manifest
(hubmeta.resolve) cannot tell; one HEAD of one file's /resolve can, with the token the nodes
will use. Not following its redirect (as huggingface_hub's get_hf_file_metadata stops at the
first off-Hub one) leaves the CDN host in its Location: the host every node must also reach.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import quote, urljoin, urlsplit

from k3deploy.cluster.hubmeta import Manifest, RepoFile
from k3deploy.core.errors import BadInputError, K3Error

if TYPE_CHECKING:
    import httpx2   # huggingface_hub 2.x's HTTP client (get_session)

_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class Origin:
    """scheme://host:port a node must reach over TCP (and TLS for https)."""
    scheme: str
    host: str
    port: int

    @classmethod
    def of(cls, url: str) -> Origin:
        parts = urlsplit(url)
        return cls(parts.scheme, (parts.hostname or "").lower(),
                   parts.port or _DEFAULT_PORTS.get(parts.scheme, 0))

    @property
    def label(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class HubReach:
    """What the gate check learned: the Hub's origin and, when /resolve redirects to another
    origin (a CDN), that one too."""
    hub: Origin
    cdn: Origin | None

    def origins(self) -> list[Origin]:
        return [self.hub] + ([self.cdn] if self.cdn and self.cdn != self.hub else [])


def probe_file(manifest: Manifest) -> RepoFile:
    """The file to resolve: the smallest LFS file (its answer redirects where the weights come
    from), else the smallest file."""
    lfs = [f for f in manifest.files if f.sha256]
    return min(lfs or manifest.files, key=lambda f: (f.size, f.path))


def resolve_url(manifest: Manifest, path: str) -> str:
    return f"{manifest.endpoint.rstrip('/')}/{manifest.repo}/resolve/{manifest.sha}/{quote(path)}"


_MAX_HOPS = 5


def check(manifest: Manifest, token: str | None, token_env: str) -> HubReach:
    """HEAD one /resolve with the token; raises BadInputError when the gate refuses it.
    Redirects within the Hub's origin are followed (a relative `/api/resolve-cache/...` one,
    swift-transformers#209), as huggingface_hub does; the first one off it is the CDN."""
    url, hub = resolve_url(manifest, probe_file(manifest).path), Origin.of(manifest.endpoint)
    for _ in range(_MAX_HOPS):
        response = _head(manifest, url, token)
        status = response.status_code
        if status in (401, 403):
            raise refusal(manifest, status, response.headers, token is not None, token_env)
        if status >= 400:
            raise K3Error(f"{manifest.endpoint} answered {status} to {url}",
                          hint="the Hub may be having trouble; re-run in a few minutes")
        location = response.headers.get("Location") if 300 <= status < 400 else None
        if not location:
            return HubReach(hub, None)
        url = urljoin(url, location)
        if Origin.of(url) != hub:
            return HubReach(hub, Origin.of(url))
    raise K3Error(f"{manifest.endpoint} redirected {_MAX_HOPS} times resolving {manifest.repo}",
                  hint="check model.endpoint (a proxy in a loop?)")


def _head(manifest: Manifest, url: str, token: str | None) -> httpx2.Response:
    # Imported late, as in hubmeta: huggingface_hub is slow to import and `plan` never needs it.
    from huggingface_hub.utils import build_hf_headers, get_session
    try:
        return get_session().head(url, headers=build_hf_headers(token=token or False),
                                  follow_redirects=False, timeout=30)
    except Exception as err:  # noqa: BLE001 - httpx and httpx2 name their errors differently
        raise K3Error(f"cannot reach {manifest.endpoint} to check access to {manifest.repo}: {err}",
                      hint="check model.endpoint and the laptop's network") from None


def refusal(manifest: Manifest, status: int, headers: Mapping[str, str], had_token: bool,
            token_env: str) -> BadInputError:
    """The gate's answer, said with what to do about it."""
    page = f"{manifest.endpoint.rstrip('/')}/{manifest.repo}"
    said = headers.get("X-Error-Message") or headers.get("X-Error-Code") or "no reason given"
    if not had_token:
        return BadInputError(
            f"the Hub refuses {manifest.repo} without a token ({status}: {said}); "
            f"${token_env} is not set",
            hint=f"accept the model's terms on {page} while logged in, create a read token "
                 f"(https://huggingface.co/settings/tokens), set {token_env} to it in the laptop's "
                 "environment and re-run")
    if status == 401:
        return BadInputError(
            f"the Hub does not accept the token in ${token_env} for {manifest.repo} ({status}: {said})",
            hint=f"the token is wrong or revoked: put a valid read token in ${token_env}")
    if headers.get("X-Error-Code") != "GatedRepo":
        return BadInputError(
            f"the Hub refuses the token in ${token_env} for {manifest.repo} with a plain {status} "
            f"({said}), not a GatedRepo one: a fine-grained token without access to gated repos",
            hint="give the token \"Read access to contents of all public gated repos you can access\" "
                 "(its permissions on https://huggingface.co/settings/tokens), or use a read token; "
                 f"the account must also have accepted the terms on {page}")
    return BadInputError(
        f"the token in ${token_env} has no access to {manifest.repo} ({status}: {said})",
        hint=f"accept the model's terms on {page} with the account the token belongs to (some "
             "repos grant access only after review); a fine-grained token also needs read access "
             "to public gated repos (its permissions on https://huggingface.co/settings/tokens)")

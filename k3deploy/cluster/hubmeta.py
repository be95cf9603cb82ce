"""What the Hub says about the model: resolved once on the laptop, pinned on every node.

The revision (a branch like `main`) is resolved to a commit sha here, once, so every node
downloads the same files even if the branch moves during a 1.5 TB download.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeGuard

from k3deploy.core.errors import BadInputError, K3Error
from k3deploy.core.redact import register
from k3deploy.core.state import atomic_write_json
from k3deploy.core.jsonvalue import JSON
from k3deploy.remote.protocol import with_schema

if TYPE_CHECKING:
    from huggingface_hub import HfApi, RepoFolder
    from huggingface_hub import RepoFile as HubFile


@dataclass(frozen=True)
class RepoFile:
    path: str
    size: int
    sha256: str | None   # LFS files: the blob's etag and what we verify
    oid: str             # git blob id (verifies small files)

    @property
    def etag(self) -> str:
        return self.sha256 or self.oid


@dataclass(frozen=True)
class Manifest:
    repo: str
    revision: str
    sha: str
    endpoint: str   # the one it was resolved against: the nodes are told it (resolve)
    files: tuple[RepoFile, ...]

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self, max_workers: int = 16) -> dict[str, JSON]:
        # The downloader's pool takes files in this order: the small ones (config, tokenizer,
        # the model's code) first, so an engine with dummy weights can start long before the
        # shards are in (steps/dry_fire/dry_fire.py).
        ordered = [*small_files(self.files), *weight_files(self.files)]
        return with_schema({"repo": self.repo, "revision": self.revision, "sha": self.sha,
                            "endpoint": self.endpoint, "max_workers": max_workers,
                            "files": [asdict(f) for f in ordered]})


def weight_files(files: Iterable[RepoFile]) -> list[RepoFile]:
    """The checkpoint shards: what an engine reads only to load the weights."""
    return [f for f in files if f.path.endswith(".safetensors")]


def small_files(files: Iterable[RepoFile]) -> list[RepoFile]:
    """Everything else: what an engine reads to build the model (config.json, the tokenizer,
    the model's code, the shard index), enough for `--load-format dummy`."""
    return [f for f in files if not f.path.endswith(".safetensors")]


def token_from_env(var: str) -> str | None:
    token = os.environ.get(var) or None
    register(token)
    return token


def _api(endpoint: str | None, token: str | None) -> HfApi:
    # Imported late: huggingface_hub reads HF_ENDPOINT at import, and `plan` never needs it.
    from huggingface_hub import HfApi
    return HfApi(endpoint=endpoint, token=token)


def resolve(repo: str, revision: str, endpoint: str | None, token: str | None,
            cache: Path | None = None) -> Manifest:
    """The revision's commit and file list. The Hub is asked which commit the revision is
    now, every run (a branch moves); a commit's file list never changes, so with `cache` it
    is listed once per commit (a 96-shard tree is the larger request)."""
    from huggingface_hub.errors import (GatedRepoError, HfHubHTTPError, RepositoryNotFoundError,
                                        RevisionNotFoundError)
    # huggingface_hub 2.x's HTTP client: a refused or dropped connection is its TransportError,
    # no OSError (a Hub that is down is an expected failure, not a traceback).
    from httpx2 import TransportError
    api = _api(endpoint, token)
    hub = endpoint or api.endpoint
    try:
        sha = api.repo_info(repo, revision=revision).sha
        if sha is None:   # typed optional in huggingface_hub; the Hub names a revision's commit
            raise K3Error(f"{hub} named no commit for {repo}@{revision}",
                          hint="check model.endpoint: it should be a Hugging Face Hub")
        files = _cached_files(cache, hub, repo, sha)
        if files is None:
            files = _listed_files(api, repo, sha)
            _keep_files(cache, hub, repo, sha, files)
    except (RepositoryNotFoundError, GatedRepoError) as err:
        raise BadInputError(f"the Hub refused {repo}: {type(err).__name__}",
                            hint="check model.repo, and that the token in your hf_token_env "
                            "variable has read access (gated repo?)") from None
    except RevisionNotFoundError:
        raise BadInputError(f"{repo} has no revision {revision!r}",
                            hint="fix model.revision in the inventory") from None
    except (HfHubHTTPError, OSError, TransportError) as err:
        raise K3Error(f"cannot read {repo}@{revision} from {hub}: {err}",
                      hint="check model.endpoint and the laptop's network") from None
    # The nodes are told the endpoint explicitly: the laptop's default (HF_ENDPOINT or the
    # public Hub) is what was resolved, and a node's own environment must not change it.
    return Manifest(repo, revision, sha, hub, files)


def _is_file(entry: HubFile | RepoFolder) -> TypeGuard[HubFile]:
    return hasattr(entry, "size")   # a folder has none


def _listed_files(api: HfApi, repo: str, sha: str) -> tuple[RepoFile, ...]:
    tree = [e for e in api.list_repo_tree(repo, revision=sha, recursive=True) if _is_file(e)]
    return tuple(RepoFile(e.path, e.size, e.lfs.sha256 if e.lfs else None, e.blob_id)
                 for e in sorted(tree, key=lambda e: e.path))


def _cache_file(cache: Path, endpoint: str, repo: str, sha: str) -> Path:
    key = hashlib.sha256(f"{endpoint}\n{repo}\n{sha}".encode()).hexdigest()[:24]
    return cache / f"{key}.json"


def _cached_files(cache: Path | None, endpoint: str, repo: str,
                  sha: str) -> tuple[RepoFile, ...] | None:
    """The commit's file list as listed before; None when not kept or not readable as one."""
    if cache is None:
        return None
    try:
        doc = json.loads(_cache_file(cache, endpoint, repo, sha).read_text())
        if (doc["endpoint"], doc["repo"], doc["sha"]) != (endpoint, repo, sha):
            return None
        return tuple(RepoFile(f["path"], int(f["size"]), f["sha256"], f["oid"])
                     for f in doc["files"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _keep_files(cache: Path | None, endpoint: str, repo: str, sha: str,
                files: tuple[RepoFile, ...]) -> None:
    if cache is None:
        return
    doc: dict[str, JSON] = {"endpoint": endpoint, "repo": repo, "sha": sha,
                            "files": [asdict(f) for f in files]}
    atomic_write_json(_cache_file(cache, endpoint, repo, sha), doc, mode=0o644)

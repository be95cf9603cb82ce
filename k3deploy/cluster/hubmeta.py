"""What the Hub says about the model: resolved once on the laptop, pinned on every node.

The revision (a branch like `main`) is resolved to a commit sha here, once, so every node
downloads the same files even if the branch moves during a 1.5 TB download.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from k3deploy.core.errors import BadInputError, K3Error
from k3deploy.core.redact import register
from k3deploy.remote.protocol import with_schema


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
    endpoint: str | None
    files: tuple[RepoFile, ...]

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self, max_workers: int = 16) -> dict:
        return with_schema({"repo": self.repo, "revision": self.revision, "sha": self.sha,
                            "endpoint": self.endpoint, "max_workers": max_workers,
                            "files": [asdict(f) for f in self.files]})


def token_from_env(var: str) -> str | None:
    token = os.environ.get(var) or None
    register(token)
    return token


def _api(endpoint: str | None, token: str | None):
    # Imported late: huggingface_hub reads HF_ENDPOINT at import, and `plan` never needs it.
    from huggingface_hub import HfApi
    return HfApi(endpoint=endpoint, token=token)


def resolve(repo: str, revision: str, endpoint: str | None, token: str | None) -> Manifest:
    from huggingface_hub.errors import (GatedRepoError, HfHubHTTPError, RepositoryNotFoundError,
                                        RevisionNotFoundError)
    api = _api(endpoint, token)
    try:
        info = api.repo_info(repo, revision=revision)
        tree = [e for e in api.list_repo_tree(repo, revision=info.sha, recursive=True)
                if hasattr(e, "size")]
    except (RepositoryNotFoundError, GatedRepoError) as err:
        raise BadInputError(f"the Hub refused {repo}: {type(err).__name__}",
                            hint="check model.repo, and that the token in your hf_token_env "
                            "variable has read access (gated repo?)") from None
    except RevisionNotFoundError:
        raise BadInputError(f"{repo} has no revision {revision!r}",
                            hint="fix model.revision in the inventory") from None
    except (HfHubHTTPError, OSError) as err:
        raise K3Error(f"cannot read {repo}@{revision} from {endpoint or 'the Hub'}: {err}",
                      hint="check model.endpoint and the laptop's network") from None
    files = tuple(RepoFile(e.path, e.size, e.lfs.sha256 if e.lfs else None, e.blob_id)
                  for e in sorted(tree, key=lambda e: e.path))
    # The nodes are told the endpoint explicitly: the laptop's default (HF_ENDPOINT or the
    # public Hub) is what was resolved, and a node's own environment must not change it.
    return Manifest(repo, revision, info.sha, endpoint or api.endpoint, files)


def manifest_for(run) -> Manifest:
    """Resolve once per run, shared by preflight (disk space) and download."""
    if run.inputs.manifest is None:
        inv = run.inv
        run.inputs.manifest = resolve(inv.model.repo, inv.model.revision, inv.model.endpoint,
                                      run.inputs.hf_token(inv.hf_token_env))
    return run.inputs.manifest

"""Deterministic generation of the mock `moonshotai/Kimi-K3` repository the testbed's Hub serves.

The same (repo id, shard count, shard size) always yields the same bytes, hashes and commit sha,
so tests can compare against known values and a restarted Hub serves an identical repo.

Shards are real safetensors files (u64 little-endian header length, JSON header, tensor bytes) whose
size equals 8 + header length + the end of the last tensor, so a reader can tell a short file from
its header. Shards are LFS files (etag = sha256; the tree's `oid` is the git sha1 of the LFS pointer);
the small files are plain git blobs (etag = git blob sha1).
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

DEFAULT_REPO = "moonshotai/Kimi-K3"
DEFAULT_SHARDS = 96
DEFAULT_SHARD_BYTES = 300_000
_LAYOUT_VERSION = 1


@dataclass(frozen=True)
class RepoFile:
    path: str
    size: int
    git_oid: str              # the tree's "oid": blob sha1 of the content, or of the LFS pointer
    sha256: str | None        # LFS files only
    pointer_size: int | None  # LFS files only

    @property
    def is_lfs(self) -> bool:
        return self.sha256 is not None

    @property
    def etag(self) -> str:
        """What huggingface_hub names the blob after: sha256 for LFS files, git sha1 otherwise."""
        return self.sha256 or self.git_oid


@dataclass(frozen=True)
class Repo:
    repo_id: str
    sha: str
    root: Path
    files: tuple[RepoFile, ...]

    def file(self, path: str) -> RepoFile | None:
        return next((f for f in self.files if f.path == path), None)

    def local_path(self, path: str) -> Path:
        return self.root / path

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def shard_names(self) -> list[str]:
        return [f.path for f in self.files if f.path.endswith(".safetensors")]


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def shard_name(index: int, total: int) -> str:
    return f"model-{index:05d}-of-{total:05d}.safetensors"


def safetensors_bytes(tensor: str, file_size: int, seed: str) -> tuple[bytes, int]:
    """A one-tensor U8 safetensors file of exactly `file_size` bytes; returns (bytes, tensor bytes)."""
    data_len = max(file_size - 200, 1)
    for _ in range(8):  # header length depends on the digits of data_len: iterate to a fixed point
        header = _safetensors_header(tensor, data_len)
        new_len = max(file_size - 8 - len(header), 1)
        if new_len == data_len:
            break
        data_len = new_len
    header = _safetensors_header(tensor, data_len)
    data = random.Random(seed).randbytes(data_len)
    return len(header).to_bytes(8, "little") + header + data, data_len


def _safetensors_header(tensor: str, data_len: int) -> bytes:
    header = {"__metadata__": {"format": "pt"},
              tensor: {"dtype": "U8", "shape": [data_len], "data_offsets": [0, data_len]}}
    raw = json.dumps(header, separators=(",", ":")).encode()
    return raw + b" " * (-len(raw) % 8)  # the format pads the header with spaces to 8-byte alignment


def _small_files(repo_id: str, shards: int, weight_map: dict, tensor_bytes: int) -> dict[str, bytes]:
    name = repo_id.split("/")[-1]
    config = {"architectures": ["KimiK3ForCausalLM"], "model_type": "kimi_k3", "torch_dtype": "bfloat16",
              "num_hidden_layers": shards, "hidden_size": 7168, "num_attention_heads": 64,
              "vocab_size": 163840, "max_position_embeddings": 262144,
              "quantization_config": {"quant_method": "mxfp4"}}
    tokens = "".join(f"{_b64(i)} {i}\n" for i in range(256))
    files = {
        "config.json": config,
        "generation_config.json": {"max_length": 262144, "eos_token_id": 163586},
        "tokenizer_config.json": {"tokenizer_class": "TikTokenTokenizer", "model_max_length": 262144},
        "model.safetensors.index.json": {"metadata": {"total_size": tensor_bytes}, "weight_map": weight_map},
    }
    out = {path: (json.dumps(body, indent=2) + "\n").encode() for path, body in files.items()}
    out["tiktoken.model"] = tokens.encode()
    out["README.md"] = f"# {name}\n\nGenerated stand-in for {repo_id} (k3deploy testbed).\n".encode()
    return out


def _b64(i: int) -> str:
    return base64.b64encode(bytes([i])).decode()


def _generate(root: Path, repo_id: str, shards: int, shard_bytes: int) -> list[RepoFile]:
    files: list[RepoFile] = []
    weight_map: dict[str, str] = {}
    tensor_bytes = 0
    for i in range(1, shards + 1):
        name, tensor = shard_name(i, shards), f"model.layers.{i - 1}.mlp.experts.weight_packed"
        body, data_len = safetensors_bytes(tensor, shard_bytes, f"{repo_id}:{name}")
        weight_map[tensor] = name
        tensor_bytes += data_len
        sha = hashlib.sha256(body).hexdigest()
        pointer = lfs_pointer(sha, len(body))
        (root / name).write_bytes(body)
        files.append(RepoFile(name, len(body), git_blob_sha1(pointer), sha, len(pointer)))
    for path, body in _small_files(repo_id, shards, weight_map, tensor_bytes).items():
        (root / path).write_bytes(body)
        files.append(RepoFile(path, len(body), git_blob_sha1(body), None, None))
    return sorted(files, key=lambda f: f.path)


def _commit_sha(repo_id: str, files: list[RepoFile]) -> str:
    listing = "".join(f"{f.git_oid} {f.path}\n" for f in files)
    return hashlib.sha1(f"{repo_id}\n{listing}".encode()).hexdigest()


def build_repo(cache_dir: str | os.PathLike, repo_id: str = DEFAULT_REPO, shards: int = DEFAULT_SHARDS,
               shard_bytes: int = DEFAULT_SHARD_BYTES) -> Repo:
    """Generate (or reuse) the repo under cache_dir; the result depends only on the arguments."""
    if shards < 1 or shard_bytes < 256:
        raise ValueError("need at least 1 shard of at least 256 bytes")
    key = hashlib.sha1(f"{_LAYOUT_VERSION}:{repo_id}:{shards}:{shard_bytes}".encode()).hexdigest()[:12]
    root = Path(cache_dir) / f"repo-{key}"
    meta = root / "repo.json"
    if not meta.exists():
        tmp = Path(cache_dir) / f".repo-{key}.{os.getpid()}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        (tmp / "files").mkdir(parents=True)
        files = _generate(tmp / "files", repo_id, shards, shard_bytes)
        doc = {"repo_id": repo_id, "sha": _commit_sha(repo_id, files), "files": [asdict(f) for f in files]}
        (tmp / "repo.json").write_text(json.dumps(doc, indent=1))
        try:
            os.rename(tmp, root)
        except OSError:  # another process generated the same repo first: identical content
            shutil.rmtree(tmp, ignore_errors=True)
    doc = json.loads(meta.read_text())
    return Repo(doc["repo_id"], doc["sha"], root / "files", tuple(RepoFile(**f) for f in doc["files"]))


def tree_entries(repo: Repo) -> list[dict]:
    """GET /api/models/{repo}/tree/{rev}: what huggingface_hub's RepoFile is built from (no Xet hash)."""
    out = []
    for f in repo.files:
        entry = {"type": "file", "oid": f.git_oid, "size": f.size, "path": f.path}
        if f.is_lfs:
            entry["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": f.pointer_size}
        out.append(entry)
    return out


def model_info(repo: Repo, blobs: bool, gated: bool) -> dict:
    """GET /api/models/{repo}[/revision/{rev}][?blobs=true]: sizes and lfs only with blobs, as the Hub does."""
    siblings = []
    for f in repo.files:
        sibling = {"rfilename": f.path}
        if blobs:
            sibling.update({"size": f.size, "blobId": f.git_oid})
            if f.is_lfs:
                sibling["lfs"] = {"sha256": f.sha256, "size": f.size, "pointerSize": f.pointer_size}
        siblings.append(sibling)
    stamp = "2026-01-01T00:00:00.000Z"
    return {"_id": repo.sha[:24], "id": repo.repo_id, "modelId": repo.repo_id, "author": repo.repo_id.split("/")[0],
            "sha": repo.sha, "lastModified": stamp, "createdAt": stamp, "private": False,
            "gated": "manual" if gated else False, "disabled": False, "downloads": 0, "likes": 0,
            "library_name": "transformers", "pipeline_tag": "text-generation",
            "tags": ["transformers", "safetensors", "kimi_k3", "text-generation"],
            "siblings": siblings, "usedStorage": repo.total_bytes}

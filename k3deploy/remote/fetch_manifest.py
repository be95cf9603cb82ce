"""The downloader's input: the pinned manifest (k3deploy.cluster.hubmeta writes it), each file's
expected size and hash, and the HF token from its 0600 env file."""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import protocol
from fetch_base import BadInput, log

HEX40, HEX64 = re.compile(r"^[0-9a-f]{40}$"), re.compile(r"^[0-9a-f]{64}$")


class FileSpec:
    def __init__(self, doc: protocol.ManifestFile):
        self.path, self.size = str(doc["path"]), int(doc["size"])
        self.sha256, self.oid = doc.get("sha256"), doc.get("oid")
        if self.sha256 is not None and not HEX64.match(self.sha256):
            raise BadInput(f"{self.path}: sha256 must be 64 lowercase hex characters")
        if self.sha256 is None and not (self.oid and HEX40.match(self.oid)):
            raise BadInput(f"{self.path}: a non-LFS file needs a 40-hex git oid")
        if self.size < 0 or self.path.startswith("/") or ".." in self.path.split("/"):
            raise BadInput(f"{self.path}: bad path or size")

    @property
    def etag(self) -> str:
        return self.sha256 or self.oid

    @property
    def algorithm(self) -> str:
        return "sha256" if self.sha256 else "git-sha1"

    def new_hasher(self) -> hashlib._Hash:
        if self.sha256:
            return hashlib.sha256()
        return hashlib.sha1(b"blob %d\0" % self.size)

    def tree_entry(self) -> protocol.Doc:
        if not self.sha256:
            return {"size": self.size, "blob_id": self.oid}
        pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.sha256}\nsize {self.size}\n"
        blob_id = self.oid or hashlib.sha1(b"blob %d\0%s" % (len(pointer), pointer.encode())).hexdigest()
        return {"size": self.size, "blob_id": blob_id, "lfs_sha256": self.sha256, "lfs_size": self.size}


class Manifest:
    def __init__(self, doc: protocol.ManifestDoc):
        try:
            protocol.check_schema(doc, "manifest")
            self.repo, self.revision = str(doc["repo"]), str(doc.get("revision") or doc["sha"])
            self.sha, self.endpoint = str(doc["sha"]), str(doc["endpoint"]).rstrip("/")
            self.max_workers = max(1, int(doc.get("max_workers", 8)))
            # Hub connections of the node, the range each request asks for, how long a file
            # may go without a new byte (the inventory's download.retry_minutes), and how often
            # a connection on a slow CDN edge may be swapped for a new one (fetch_conns.py).
            self.connections = max(1, int(doc.get("connections", 32)))
            self.segment_bytes = max(64 << 10, int(doc.get("segment_bytes", 32 << 20)))
            self.retry_seconds = float(doc.get("retry_seconds", 900))
            # A replacement is a new CDN connection (the signed URL is kept: no /resolve), and
            # 70% of new ones land on a slow edge again. On a 25 Gbit/s leg (edges of 67.6 and
            # 8.7 MB/s, 96 connections) the link fills at ~40 fast edges, ~11 more than the
            # first draw gives: ~37 replacements, ~2 s of the link partly idle at this rate.
            self.replace_per_second = float(doc.get("replace_per_second", 16.0))
            # worker processes (fetch_workers.py); None: as many as the files repay
            asked = doc.get("worker_processes")
            self.worker_processes = None if asked is None else max(1, int(asked))
            self.files = [FileSpec(f) for f in doc["files"]]
            self.peers = doc.get("peers")  # k3deploy.cluster.fanout.peer_block, or None
        except protocol.SchemaMismatch as e:
            raise BadInput(str(e)) from None
        except (KeyError, TypeError, ValueError) as e:
            raise BadInput(f"manifest: missing or bad field: {e}") from None
        if not HEX40.match(self.sha) or self.repo.count("/") != 1 or not self.files:
            raise BadInput("manifest: needs a 40-hex sha, an org/name repo and at least one file")
        if len({f.path for f in self.files}) != len(self.files):
            raise BadInput("manifest: duplicate file paths")

    @classmethod
    def load(cls, path: str) -> Manifest:
        try:
            return cls(json.loads(Path(path).read_text()))
        except (OSError, ValueError) as e:
            raise BadInput(f"cannot read manifest {path}: {e}") from None


def read_token(env_file: str | None) -> str | None:
    if not env_file:
        return None
    try:
        if os.stat(env_file).st_mode & 0o077:
            log(f"warning: {env_file} is readable by group/others; it should be 0600")
        lines = Path(env_file).read_text().splitlines()
    except OSError as e:
        raise BadInput(f"cannot read env file {env_file}: {e.strerror}") from None
    for line in lines:
        key, sep, value = line.strip().removeprefix("export ").partition("=")
        if sep and key.strip() == "HF_TOKEN":
            return value.strip().strip("'\"") or None
    return None

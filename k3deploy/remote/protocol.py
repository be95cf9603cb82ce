"""The laptop<->node protocol: work-dir paths, the HF cache folder, the ledger name, and the
schema version of the manifest and progress documents.

Standard library only. The laptop imports it as k3deploy.remote.protocol; the node-side
programs import it as `protocol` from their own directory (it is uploaded next to them), or
get it bundled ahead of a `python3 -c` program (bundled()). One version number covers the
manifest and the progress document: a node program that reads a document of another version
stops with an error naming both, instead of misreading it.
"""

import os

SCHEMA_VERSION = 1
LEDGER_NAME = ".k3deploy-verified.json"   # in the repo's cache folder: etag -> size, mtime_ns


class SchemaMismatch(ValueError):
    pass


def cache_folder(repo: str) -> str:
    """The Hugging Face cache's folder name for a model repo: models--{owner}--{name}."""
    return "models--" + repo.replace("/", "--")


def cache_storage(hf_home: str, repo: str) -> str:
    return os.path.join(hf_home, "hub", cache_folder(repo))


def ledger_entry(size: int, mtime_ns: int, verified: float) -> dict:
    """What the ledger records for a blob verified by its hash."""
    return {"size": size, "mtime_ns": mtime_ns, "verified": verified}


def ledger_vouches(entry, size: int, mtime_ns: int) -> bool:
    """The blob on disk is the one that was verified: same size and mtime."""
    entry = entry or {}
    return entry.get("size") == size and entry.get("mtime_ns") == mtime_ns


def with_schema(doc: dict) -> dict:
    return {"schema": SCHEMA_VERSION, **doc}


def check_schema(doc, what: str):
    """doc itself if it speaks this version; SchemaMismatch naming both versions otherwise."""
    found = doc.get("schema") if isinstance(doc, dict) else None
    if found != SCHEMA_VERSION:
        raise SchemaMismatch(f"{what} has schema version {found} but this node program speaks "
                             f"version {SCHEMA_VERSION}: laptop and node programs come from "
                             "different k3deploy versions; re-run so the node programs are "
                             "uploaded again")
    return doc


class WorkPaths:
    """The files k3deploy keeps in a node's work dir (inventory paths.work)."""

    def __init__(self, work: str):
        self.work = work
        self.fetcher = f"{work}/fetch_weights.py"
        self.peer_client = f"{work}/peer_fetch.py"
        self.protocol = f"{work}/protocol.py"
        self.manifest = f"{work}/manifest.json"
        self.progress = f"{work}/download-progress.json"
        self.log = f"{work}/download.log"
        self.env = f"{work}/hf.env"
        self.pid = f"{work}/download.pid"
        self.secrets = f"{work}/secrets"   # the endpoint key, mounted into the engine container
        self.guard = f"{work}/guard"
        self.peer = PeerFiles(work)


class PeerFiles:
    """The fan-out peer server's files in the work dir."""

    def __init__(self, work: str):
        self.server = f"{work}/peer_server.py"
        self.manifest, self.secret = f"{work}/peer-manifest.json", f"{work}/peer.secret"
        self.pid, self.ready = f"{work}/peer.pid", f"{work}/peer.ready"
        self.log, self.served = f"{work}/peer.log", f"{work}/peer-served.jsonl"
        # Test hook (the testbed's peer-corrupt fault): while it exists, served bytes are flipped.
        self.corrupt_flag = f"{work}/peer-corrupt.testhook"

"""The laptop<->node protocol: every node path rule (the defaults under the NVMe mount, the
work-dir files, the HF cache layout), the ledger, and the schema version of the manifest and
progress documents.

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


# -- under the NVMe mount: the defaults of the inventory's paths ------------------------------
def work_dir(nvme: str) -> str:
    """k3deploy's own files on the node (downloader, manifests, secrets, logs): see WorkPaths."""
    return f"{nvme.rstrip('/')}/.k3deploy"


def default_hf_home(nvme: str) -> str:
    return f"{nvme.rstrip('/')}/hf"


def default_docker_root(nvme: str) -> str:
    return f"{nvme.rstrip('/')}/docker"


def containerd_root(nvme: str) -> str:
    """containerd's root on the NVMe (the containerd image store of Docker >= 29 keeps the
    engine image there, not under data-root)."""
    return f"{nvme.rstrip('/')}/containerd"


# -- the Hugging Face cache, as huggingface_hub lays it out -----------------------------------
def hub_cache(hf_home: str) -> str:
    return os.path.join(hf_home, "hub")


def cache_folder(repo: str) -> str:
    """The Hugging Face cache's folder name for a model repo: models--{owner}--{name}."""
    return "models--" + repo.replace("/", "--")


def cache_storage(hf_home: str, repo: str) -> str:
    return os.path.join(hub_cache(hf_home), cache_folder(repo))


def cache_locks(hf_home: str, repo: str) -> str:
    """huggingface_hub's lock files of a repo (.locks/<folder>/<etag>.lock)."""
    return os.path.join(hub_cache(hf_home), ".locks", cache_folder(repo))


def blobs_dir(storage: str) -> str:
    return os.path.join(storage, "blobs")


def blob_path(storage: str, etag: str) -> str:
    return os.path.join(blobs_dir(storage), etag)


def partial_path(storage: str, etag: str) -> str:
    """A blob being downloaded (resumed with HTTP Range): blobs/<etag>.k3deploy-partial. Not
    `.incomplete`: `hf cache prune` deletes every blobs/*.incomplete (huggingface_hub
    utils/_cache_manager.py _scan_incomplete_files)."""
    return blob_path(storage, etag) + ".k3deploy-partial"


def ranges_path(storage: str, etag: str) -> str:
    """The partial's resume record: the byte ranges written (remote/fetch_ranges.py)."""
    return partial_path(storage, etag) + ".ranges.json"


def legacy_partial_path(storage: str, etag: str) -> str:
    """Where k3deploy before the ranged downloader (and huggingface_hub <= 1.17) kept a partial."""
    return blob_path(storage, etag) + ".incomplete"


def partial_bytes(path: str) -> int:
    """Bytes a (possibly sparse) partial holds: its allocated size, at most its length."""
    st = os.stat(path)
    return min(st.st_size, st.st_blocks * 512)


def ledger_path(storage: str) -> str:
    return os.path.join(storage, LEDGER_NAME)


def snapshot_path(storage: str, sha: str, path: str) -> str:
    """The link a revision's file is read through: snapshots/<sha>/<path> -> ../../blobs/<etag>."""
    return os.path.join(storage, "snapshots", sha, path)


def ledger_entry(size: int, mtime_ns: int, verified: float) -> dict:
    """What the ledger records for a blob verified by its hash."""
    return {"size": size, "mtime_ns": mtime_ns, "verified": verified}


def ledger_vouches(entry, size: int, mtime_ns: int) -> bool:
    """The blob on disk is the one that was verified: same size and mtime."""
    entry = entry or {}
    return entry.get("size") == size and entry.get("mtime_ns") == mtime_ns


def download_ended(state: str | None) -> bool:
    """The downloader's progress `state` says it ended: it writes "done" or "failed" after its
    last verify, before it exits ("running" while it works)."""
    return state in ("done", "failed")


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


# The node-side downloader: fetch_weights.py and every module it imports by plain name from its
# own directory. Uploaded side by side into the work dir, by the download step and by the peer
# server's start (which imports the manifest and cache readers from the same files).
DOWNLOADER_FILES = ("fetch_weights.py", "fetch_base.py", "fetch_manifest.py", "fetch_cache.py",
                    "fetch_progress.py", "fetch_ranges.py", "fetch_hub.py", "fetch_conns.py",
                    "fetch_retry.py", "fetch_http.py", "fetch_workers.py", "peer_fetch.py",
                    "peer_schedule.py", "protocol.py", "peer_cache.py", "peer_image.py", "image_peers.py",
                    "peer_blobs.py", "thread_pool.py", "direct_io.py", "fetch_reader.py")


class WorkPaths:
    """The files k3deploy keeps in a node's work dir (inventory paths.work)."""

    def __init__(self, work: str):
        self.work = work
        self.fetcher = f"{work}/fetch_weights.py"   # the entry of DOWNLOADER_FILES
        self.manifest = f"{work}/manifest.json"
        self.progress = f"{work}/download-progress.json"
        self.log = f"{work}/download.log"
        self.env = f"{work}/hf.env"
        self.pid = f"{work}/download.pid"
        self.secrets = f"{work}/secrets"   # the endpoint key, mounted into the engine container
        self.guard = f"{work}/guard"
        # Mounted into the Ray head container: the exec'd `vllm serve` writes its output here,
        # because a detached `docker exec` keeps none (engines/vllm.py).
        self.serve_logs = f"{work}/serve-logs"
        # The engines' compile caches, one dir per key (engines/compile_cache_key.py), on NVMe.
        self.compile_cache = f"{work}/compile-cache"
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

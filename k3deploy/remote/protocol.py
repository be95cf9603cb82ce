"""The laptop<->node protocol: every node path rule (the defaults under the NVMe mount, the
work-dir files, the HF cache layout), the ledger, and the schema version of the manifest and
progress documents.

Standard library only. The laptop imports it as k3deploy.remote.protocol; the node-side
programs import it as `protocol` from their own directory (it is uploaded next to them), or
get it bundled ahead of a `python3 -c` program (bundled()). One version number covers the
manifest and the progress document: a node program that reads a document of another version
stops with an error naming both, instead of misreading it.
"""

import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TypeAlias, TypedDict, TypeVar

# A parsed JSON document, as json.loads returns it (k3deploy.core.jsonvalue's, which the node-side
# programs cannot import: they ship without the package).
JSON: TypeAlias = dict[str, "JSON"] | list["JSON"] | str | int | float | bool | None
Doc: TypeAlias = dict[str, JSON]
# A document to write (json.dumps): read-only views, so a dict[str, list[str]] is one too
JSONable: TypeAlias = Mapping[str, "JSONable"] | Sequence["JSONable"] | str | int | float | bool | None
_Doc = TypeVar("_Doc")


class ManifestFile(TypedDict):
    """A file of the pinned manifest (k3deploy.cluster.hubmeta RepoFile): an LFS file by its
    sha256, any other by its git oid."""
    path: str
    size: int
    sha256: str | None
    oid: str


class PeerBlock(TypedDict):
    """The `peers` part of one node's manifest (k3deploy.cluster.fanout.peer_block)."""
    self: str
    port: int
    secret_file: str
    nodes: dict[str, str]    # every other node: name -> private address
    owner: dict[str, str]    # large file's path -> the node that fetches it from the Hub
    stall_seconds: float


class PeerIndex(TypedDict):
    """What a peer asks another first (peer_server.py GET /index, peer_blobs.py Blobs.index):
    the blobs it serves verified, its partials' bytes by etag, and its downloader's state."""
    verified: list[str]
    partial: dict[str, int]
    downloader: str | None


# a total=False base rather than NotRequired (Python 3.11): this module runs on the node's python3
class _ManifestOptions(TypedDict, total=False):
    """What the download step adds to the manifest for one node (steps/weights/download.py,
    steps/weights/peers.py); remote/fetch_manifest.py Manifest has a default for each."""
    revision: str
    max_workers: int
    connections: int
    segment_bytes: int
    retry_seconds: float
    replace_per_second: float
    worker_processes: int | None
    peers: PeerBlock | None


class ManifestDoc(_ManifestOptions):
    """The pinned manifest as k3deploy.cluster.hubmeta Manifest.to_json writes it."""
    schema: int
    repo: str
    sha: str
    endpoint: str
    files: list[ManifestFile]

# One job of the batch's Python fact interpreter (node/facts.py compose -> remote/fact_runner.py
# run, as a literal in its source): (section file, fact name, program, its argv or the operation's
# arguments, its stdin, operation, the operation's shell command under sudo for a login not root).
# A job has a program or an operation, never both.
FactJob: TypeAlias = tuple[str, str, str | None, tuple[str, ...], str | None, str | None, str | None]

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


def json_value(value: JSON) -> JSON:
    """json.load's result as the JSON it is (json.load is typed to return Any)."""
    return value


def json_object(text: str | bytes) -> Doc | None:
    """The JSON object in `text`; None when it is JSON but not an object (ValueError when it
    is not JSON)."""
    value = json_value(json.loads(text))
    return value if isinstance(value, dict) else None


def ledger_entry(size: int, mtime_ns: int, verified: float) -> Doc:
    """What the ledger records for a blob verified by its hash."""
    return {"size": size, "mtime_ns": mtime_ns, "verified": verified}


def ledger_vouches(entry: JSON, size: int, mtime_ns: int) -> bool:
    """The blob on disk is the one that was verified: same size and mtime."""
    return isinstance(entry, dict) and entry.get("size") == size and entry.get("mtime_ns") == mtime_ns


def download_ended(state: str | None) -> bool:
    """The downloader's progress `state` says it ended: it writes "done" or "failed" after its
    last verify, before it exits ("running" while it works)."""
    return state in ("done", "failed")


# -- documents a node process rewrites while it works: the one reading of them ---------------
# A writer killed by SIGKILL, the OOM killer or a reboot never writes its end: its last document
# says it works for ever. Every reader (status, watch, the download step, the hold) reads such a
# document here, with whether its writer still lives.
STOPPED = "stopped"   # the document says its writer works, and the writer is dead
UNREADABLE = "unreadable"   # there is a document, but not a JSON object


@dataclass(frozen=True)
class Writer:
    """What rewrites a document: its program (a file name in its argv), the document's key for
    its state, and the states that mean it is still at work."""
    script: str
    key: str
    working: tuple[str, ...]


DOWNLOADER = Writer("fetch_weights.py", "state", ("running",))   # fetch_progress.py
GUARD = Writer("guard.py", "phase", ("watching",))                # guard.py write_state
WRITERS = {"download": DOWNLOADER, "guard": GUARD}   # by the name doc_reading.py is run with


@dataclass(frozen=True)
class Reading:
    """A document and its writer. `state` is the document's own, except STOPPED for a dead
    writer's "still working"; "starting" when a live writer has not written yet; None when
    there is neither. `said`, `written` and `age`: how and when the writer was last seen."""
    state: str | None
    said: str | None        # the state the document itself says
    alive: bool             # the writer's process lives
    written: float | None   # the document's last write, epoch seconds on the node's clock
    age: float | None       # seconds since then, on the node's clock (no laptop clock skew)
    doc: Doc | None
    error: str | None = None   # why the document could not be read
    pid: int | None = None     # the live writer's, to stop it (None when it is dead)

    def document(self) -> Doc:
        return asdict(self)

    @classmethod
    def from_document(cls, doc: Doc) -> "Reading":
        """The laptop's side of document() (a missing key takes its neutral value)."""
        inner = doc.get("doc")
        return cls(state=_text(doc.get("state")), said=_text(doc.get("said")),
                   alive=doc.get("alive") is True, written=_number(doc.get("written")),
                   age=_number(doc.get("age")), doc=inner if isinstance(inner, dict) else None,
                   error=_text(doc.get("error")), pid=_pid(doc.get("pid")))


def _text(value: JSON) -> str | None:
    return value if isinstance(value, str) else None


def _pid(value: JSON) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _number(value: JSON) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def reading(doc: JSON, writer: Writer, live_pid: int | None, written: float | None = None,
            now: float | None = None, error: str | None = None) -> Reading:
    """The rule, from what was seen of a document and its writer (`live_pid`: the writer's
    process, when one lives)."""
    alive = live_pid is not None
    said = _text(doc.get(writer.key)) if isinstance(doc, dict) else None
    state: str | None
    if error is not None:
        state = UNREADABLE
    elif doc is None:
        state = "starting" if alive else None
    else:
        state = STOPPED if said in writer.working and not alive else said
    age = None if written is None or now is None else max(0.0, now - written)
    return Reading(state, said, alive, written, age, doc if isinstance(doc, dict) else None,
                   error, live_pid)


def process_runs(pid: JSON, script: str) -> bool:
    """Process `pid` lives and runs `script` (a file of that name in its argv): a pid the
    kernel gave to another program since reads as dead, as does a zombie (no argv)."""
    if not isinstance(pid, (int, float, str)):
        return False   # no pid (None, a list, an object): int() of it would raise TypeError
    try:
        with open(f"/proc/{int(pid)}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
    except (OSError, TypeError, ValueError):
        return False
    return any(os.path.basename(arg) == script.encode() for arg in argv)


def read_document(path: str, writer: Writer, pid_file: str | None = None) -> Reading:
    """Node side: the document at `path` and its writer, by the pid in `pid_file` (written by
    the start command, before the first document) or the document's own "pid"."""
    doc: Doc | None = None
    error: str | None = None
    written: float | None = None
    try:
        with open(path, "rb") as fh:
            written = os.fstat(fh.fileno()).st_mtime
            doc = json_object(fh.read())
        if doc is None:
            error = "not a JSON object"
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as err:
        error = f"{type(err).__name__}: {err}"
    pids: list[JSON] = [_pid_in(pid_file), (doc or {}).get("pid")]
    live = next((int(pid) for pid in pids
                 if isinstance(pid, (int, float, str)) and process_runs(pid, writer.script)), None)
    return reading(doc, writer, live, written, time.time(), error)


def _pid_in(pid_file: str | None) -> int | None:
    if pid_file is None:
        return None
    try:
        with open(pid_file) as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def with_schema(doc: Doc) -> Doc:
    return {"schema": SCHEMA_VERSION, **doc}


def check_schema(doc: _Doc, what: str) -> _Doc:
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
        # Mounted into every engine container: NCCL's per-process debug files (NCCL_DEBUG_FILE),
        # the only NCCL output that is line-buffered (engines/fabric.py); cleared at each launch.
        self.nccl_logs = f"{work}/nccl-logs"
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

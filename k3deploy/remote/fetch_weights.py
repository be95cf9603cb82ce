#!/usr/bin/env python3
"""Node-side verified, resumable downloader of one pinned Hub revision into the HF cache.

Runs on a GPU node (Python 3.11, standard library + huggingface_hub >= 1.x), started detached:

    python3 fetch_weights.py --manifest M.json --hf-home DIR --progress P.json [--env-file E]

Transfer engine: plain HTTP range requests made through huggingface_hub's own HTTP client
(`get_session()`, `hf_hub_url()`, `build_hf_headers()`), so endpoint, user agent, token handling
and proxies behave exactly as with the real client; `max_workers` files are fetched in parallel.
Why not the library's downloaders: hf_transfer support was removed in huggingface_hub 1.0
(`HF_HUB_ENABLE_HF_TRANSFER` is now a no-op that only warns); Xet (`hf_xet`) and the plain HTTP path
of `snapshot_download` resume a dropped connection in-process, but since 1.18 a *killed* process
leaves an orphan `blobs/<etag>.<8 hex>.incomplete` and the re-run starts that file from byte 0 (with
16 x 16 GB shards in flight, one crash costs ~256 GB per node); and 2.4's plain HTTP path keeps only
whole 10 MiB pieces of a body cut mid-way. This script therefore owns resume, and writes every chunk
it receives:
  - each file goes to `blobs/<etag>.incomplete`; a re-run hashes what is on disk and continues with
    `Range: bytes=N-` (206; a 200 means the server ignored the range, so it starts over);
  - an orphaned huggingface_hub 2.x partial of the same blob is adopted (renamed to ours) first;
  - the sha256 (LFS) or git blob sha1 (others) is checked before the atomic rename into `blobs/`;
    a mismatch deletes the partial and refetches, at most VERIFY_ATTEMPTS times;
  - verified blobs are recorded in `<repo cache>/.k3deploy-verified.json` keyed by etag, size and
    mtime, so a re-run skips them without re-hashing 1.5 TB; a blob missing from that ledger
    (e.g. fetched by another tool) is hashed once. The ledger lives in the cache, so it is wiped
    together with the blobs it vouches for.
It writes the standard cache layout (`blobs/`, relative `snapshots/<sha>/<path>` links,
`refs/<revision>`, `trees/<sha>.json`), so `HF_HUB_OFFLINE=1 snapshot_download(repo, revision=sha)`
and `hf cache verify` work on the result. SIGKILL-safe at any moment.

Manifest: {"repo", "revision", "sha", "endpoint", "max_workers",
           "files": [{"path", "size", "sha256": <LFS sha256> | null, "oid": <git blob sha1>}]}
The env file (0600) holds HF_TOKEN=...; the token is never put in argv or printed.
Exit codes: 0 every file verified and linked; 1 download failed or stopped by SIGTERM/SIGINT (the
last stderr line and the progress "error" say which file and why); 2 bad input (manifest, env file,
huggingface_hub missing); 3 another fetch_weights already runs on this cache and repo (its progress
file is left alone). Per-blob work holds huggingface_hub's own `.locks/<repo>/<etag>.lock`, so a
concurrent huggingface_hub download of the same blob is waited for, never raced.
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # protocol.py, peer_fetch.py ship next to us
sys.dont_write_bytecode = True  # no __pycache__ in the node's k3deploy dir
import protocol  # noqa: E402

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_BUSY = 0, 1, 2, 3
VERIFY_ATTEMPTS = 3        # full fetches of one file whose hash keeps mismatching
RETRIES_WITHOUT_PROGRESS = 8  # consecutive failed requests that brought no new byte
BACKOFF_CAP_SECONDS = 30.0
_HEX40, _HEX64 = re.compile(r"^[0-9a-f]{40}$"), re.compile(r"^[0-9a-f]{64}$")


class BadInput(Exception):
    pass


class DownloadError(Exception):
    pass


class Stopped(Exception):
    pass


def log(message: str) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} fetch_weights: {message}", flush=True)


def write_json_atomic(path: Path, doc) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, path)


class FileSpec:
    def __init__(self, doc: dict):
        self.path, self.size = str(doc["path"]), int(doc["size"])
        self.sha256, self.oid = doc.get("sha256"), doc.get("oid")
        if self.sha256 is not None and not _HEX64.match(self.sha256):
            raise BadInput(f"{self.path}: sha256 must be 64 lowercase hex characters")
        if self.sha256 is None and not (self.oid and _HEX40.match(self.oid)):
            raise BadInput(f"{self.path}: a non-LFS file needs a 40-hex git oid")
        if self.size < 0 or self.path.startswith("/") or ".." in self.path.split("/"):
            raise BadInput(f"{self.path}: bad path or size")

    @property
    def etag(self) -> str:
        return self.sha256 or self.oid

    @property
    def algorithm(self) -> str:
        return "sha256" if self.sha256 else "git-sha1"

    def new_hasher(self):
        if self.sha256:
            return hashlib.sha256()
        return hashlib.sha1(b"blob %d\0" % self.size)

    def tree_entry(self) -> dict:
        if not self.sha256:
            return {"size": self.size, "blob_id": self.oid}
        pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.sha256}\nsize {self.size}\n"
        blob_id = self.oid or hashlib.sha1(b"blob %d\0%s" % (len(pointer), pointer.encode())).hexdigest()
        return {"size": self.size, "blob_id": blob_id, "lfs_sha256": self.sha256, "lfs_size": self.size}


class Manifest:
    def __init__(self, doc: dict):
        try:
            protocol.check_schema(doc, "manifest")
            self.repo, self.revision = str(doc["repo"]), str(doc.get("revision") or doc["sha"])
            self.sha, self.endpoint = str(doc["sha"]), str(doc["endpoint"]).rstrip("/")
            self.max_workers = max(1, int(doc.get("max_workers", 8)))
            self.files = [FileSpec(f) for f in doc["files"]]
            self.peers = doc.get("peers")  # k3deploy.cluster.fanout.peer_block, or None
        except protocol.SchemaMismatch as e:
            raise BadInput(str(e)) from None
        except (KeyError, TypeError, ValueError) as e:
            raise BadInput(f"manifest: missing or bad field: {e}") from None
        if not _HEX40.match(self.sha) or self.repo.count("/") != 1 or not self.files:
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


class RepoCache:
    """Paths of one repo inside the HF cache, plus the link/ref/tree writers."""

    def __init__(self, hf_home: str, repo: str):
        self.root = Path(hf_home) / "hub"
        self.folder = protocol.cache_folder(repo)
        self.storage = self.root / self.folder
        self.blobs = self.storage / "blobs"
        self.locks = self.root / ".locks" / self.folder
        for d in (self.blobs, self.locks):
            d.mkdir(parents=True, exist_ok=True)

    def blob(self, etag: str) -> Path:
        return self.blobs / etag

    def partial(self, etag: str) -> Path:
        return self.blobs / f"{etag}.incomplete"

    def orphans(self, etag: str) -> list[Path]:
        """Partials huggingface_hub >= 1.18 leaves behind: blobs/<etag>.<8 hex>.incomplete."""
        pattern = re.compile(re.escape(etag) + r"\.[0-9a-f]{8}\.incomplete$")
        return [p for p in self.blobs.glob(f"{etag}.*.incomplete") if pattern.match(p.name)]

    def link(self, sha: str, spec: FileSpec) -> None:
        pointer = self.storage / "snapshots" / sha / spec.path
        pointer.parent.mkdir(parents=True, exist_ok=True)
        target = os.path.relpath(self.blob(spec.etag), pointer.parent)
        if pointer.is_symlink() and os.readlink(pointer) == target:
            return
        tmp = pointer.with_name(f".{pointer.name}.{os.getpid()}.tmp")
        tmp.unlink(missing_ok=True)
        os.symlink(target, tmp)
        os.replace(tmp, pointer)

    def write_ref(self, revision: str, sha: str) -> None:
        if revision == sha or _HEX40.match(revision):
            return
        ref = self.storage / "refs" / revision
        ref.parent.mkdir(parents=True, exist_ok=True)
        if not ref.exists() or ref.read_text() != sha:
            write_text_atomic(ref, sha)

    def write_tree(self, sha: str, files: list[FileSpec]) -> None:
        """trees/<sha>.json, as huggingface_hub >= 1.22 writes it: offline loads then detect missing files."""
        tree = self.storage / "trees" / f"{sha}.json"
        tree.parent.mkdir(parents=True, exist_ok=True)
        doc = {"format_version": 1, "files": {f.path: f.tree_entry() for f in sorted(files, key=lambda f: f.path)}}
        write_json_atomic(tree, doc)


def write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class Ledger:
    """Blobs already verified: etag -> size and mtime of the blob at verification time."""

    def __init__(self, path: Path):
        self.path, self.lock = path, threading.Lock()
        try:
            self.entries = json.loads(path.read_text())
        except (OSError, ValueError):
            self.entries = {}

    def vouches_for(self, etag: str, st: os.stat_result) -> bool:
        return protocol.ledger_vouches(self.entries.get(etag), st.st_size, st.st_mtime_ns)

    def record(self, etag: str, blob: Path) -> None:
        st = blob.stat()
        with self.lock:
            self.entries[etag] = protocol.ledger_entry(st.st_size, st.st_mtime_ns, time.time())
            write_json_atomic(self.path, self.entries)


class Progress:
    """Counters the laptop polls, written atomically about once a second and at the end."""

    def __init__(self, path: Path, files: list[FileSpec]):
        self.path, self.lock, self.files = path, threading.Lock(), files
        self.verified: set[str] = set()
        self.on_disk: dict[str, int] = {}  # partial bytes of files in flight
        self.received, self.samples = 0, collections.deque(maxlen=12)
        self.by_source: dict[str, int] = {}  # "hub" or a peer's name -> bytes received
        self.bad_peers: set[str] = set()      # peers that served bytes failing a checksum
        self.started, self.state, self.error = time.time(), "running", None
        self.stop_event = threading.Event()

    def partial(self, spec: FileSpec, have: int) -> None:
        with self.lock:
            self.on_disk[spec.path] = have

    def received_bytes(self, spec: FileSpec, n: int, source: str = "hub") -> None:
        with self.lock:
            self.on_disk[spec.path] = self.on_disk.get(spec.path, 0) + n
            self.received += n
            self.by_source[source] = self.by_source.get(source, 0) + n

    def file_done(self, spec: FileSpec) -> None:
        with self.lock:
            self.on_disk.pop(spec.path, None)
            self.verified.add(spec.path)

    def document(self) -> dict:
        with self.lock:
            now = time.time()
            self.samples.append((now, self.received))
            t0, r0 = self.samples[0]
            done = [f for f in self.files if f.path in self.verified]
            shards = [f for f in self.files if f.path.endswith(".safetensors")]
            return protocol.with_schema({"pid": os.getpid(), "state": self.state, "error": self.error,
                    "bytes_total": sum(f.size for f in self.files),
                    "bytes_done": sum(f.size for f in done) + sum(self.on_disk.values()),
                    "rate_bps": int((self.received - r0) / (now - t0)) if now > t0 else 0,
                    "files_total": len(self.files), "files_done": len(done),
                    "shards_total": len(shards), "shards_done": sum(f.path in self.verified for f in shards),
                    "hub_bytes": self.by_source.get("hub", 0),
                    "peer_bytes": sum(n for s, n in self.by_source.items() if s != "hub"),
                    "peer_bytes_by": {s: n for s, n in self.by_source.items() if s != "hub"},
                    "bad_peers": sorted(self.bad_peers),
                    "started": self.started, "updated": now})

    def write(self) -> None:
        write_json_atomic(self.path, self.document())

    def run_reporter(self) -> threading.Thread:
        def loop():
            while not self.stop_event.wait(1.0):
                self.write()
        thread = threading.Thread(target=loop, name="progress", daemon=True)
        thread.start()
        return thread


class PartialBlob:
    """blobs/<etag>.incomplete with a running hash of everything in it."""

    def __init__(self, path: Path, spec: FileSpec, progress: Progress):
        self.path, self.spec, self.progress = path, spec, progress
        self.hasher, self.have, self.sources = spec.new_hasher(), 0, set()
        if path.exists() and path.stat().st_size > spec.size:
            log(f"{spec.path}: partial file is larger than the file; starting over")
            path.unlink()
        with open(path, "ab+") as f:  # hash what an earlier run left, so resuming needs no refetch
            f.seek(0)
            while chunk := f.read(8 << 20):
                self.hasher.update(chunk)
                self.have += len(chunk)
        self.resumed_from = self.have
        progress.partial(spec, self.have)

    def append(self, f, data: bytes, source: str = "hub") -> None:
        f.write(data)
        self.hasher.update(data)
        self.have += len(data)
        self.sources.add(source)
        self.progress.received_bytes(self.spec, len(data), source)

    def restart(self, f) -> None:
        f.seek(0)
        f.truncate()
        self.hasher, self.have, self.resumed_from = self.spec.new_hasher(), 0, 0
        self.progress.partial(self.spec, 0)


class Fetcher:
    """Ranged GETs through huggingface_hub's HTTP client, with bounded retries."""

    def __init__(self, manifest: Manifest, token: str | None, stop_event: threading.Event):
        from huggingface_hub import constants, hf_hub_url
        from huggingface_hub.utils import build_hf_headers, get_session
        self.manifest, self.stop_event, self.url_for = manifest, stop_event, hf_hub_url
        self.session, self.timeout = get_session(), constants.HF_HUB_DOWNLOAD_TIMEOUT
        self.headers = build_hf_headers(token=token, library_name="k3deploy-fetch-weights", library_version="1")
        self.headers["Accept-Encoding"] = "identity"  # byte offsets must be offsets in the file itself
        http_module = sys.modules.get(type(self.session).__module__.split(".")[0])
        self.transport_errors = (getattr(http_module, "TransportError", OSError),)

    def fetch(self, spec: FileSpec, part: PartialBlob) -> None:
        url = self.url_for(self.manifest.repo, spec.path, revision=self.manifest.sha, endpoint=self.manifest.endpoint)
        failures = 0
        with open(part.path, "ab") as f:
            while part.have < spec.size:
                before = part.have
                try:
                    self._request(url, spec, part, f)
                except self.transport_errors as e:
                    reason = f"{type(e).__name__}: {e}"
                except RetryableStatus as e:
                    reason = str(e)
                else:
                    reason = "the response ended early"
                if part.have >= spec.size:
                    break
                failures = 0 if part.have > before else failures + 1
                if failures >= RETRIES_WITHOUT_PROGRESS:
                    raise DownloadError(f"{spec.path}: gave up after {failures} attempts without progress ({reason})")
                delay = min(BACKOFF_CAP_SECONDS, 0.25 * 2 ** max(failures - 1, 0))
                log(f"{spec.path}: {reason}; resuming at byte {part.have} in {delay:.2f}s")
                if self.stop_event.wait(delay):
                    raise Stopped()
            f.flush()
            os.fsync(f.fileno())

    def _request(self, url: str, spec: FileSpec, part: PartialBlob, f) -> None:
        headers = dict(self.headers)
        if part.have:
            headers["Range"] = f"bytes={part.have}-"
        with self.session.stream("GET", url, headers=headers, timeout=self.timeout) as response:
            self._check_status(response, spec, part)
            if part.have and response.status_code == 200:
                log(f"{spec.path}: server ignored the range request; starting the file over")
                part.restart(f)
            for chunk in response.iter_bytes():
                if self.stop_event.is_set():
                    raise Stopped()
                if part.have + len(chunk) > spec.size:
                    part.restart(f)
                    raise DownloadError(f"{spec.path}: server sent more than the expected {spec.size} bytes")
                part.append(f, chunk)

    def _check_status(self, response, spec: FileSpec, part: PartialBlob) -> None:
        status = response.status_code
        if status in (200, 206):
            content_range = response.headers.get("Content-Range", "")
            if status == 206 and not content_range.startswith(f"bytes {part.have}-"):
                raise RetryableStatus(f"unexpected Content-Range {content_range!r}")
            total = content_range.rpartition("/")[2] if status == 206 else response.headers.get("Content-Length")
            if response.headers.get("Content-Encoding", "identity") != "identity":
                total = None  # a compressed length says nothing about the file's size
            if total and total.isdigit() and int(total) != spec.size:
                raise DownloadError(f"{spec.path}: the server has {total} bytes, the manifest says {spec.size}")
            return
        response.read()
        if status in (408, 429) or status >= 500:
            raise RetryableStatus(f"HTTP {status}")
        from huggingface_hub.utils import hf_raise_for_status
        try:
            hf_raise_for_status(response)
        except Exception as e:
            reason = response.headers.get("X-Error-Message") or (str(e).strip().splitlines() or [""])[0]
            raise DownloadError(f"{spec.path}: HTTP {status} {type(e).__name__}: {reason}") from None
        raise DownloadError(f"{spec.path}: unexpected HTTP {status}")


class RetryableStatus(Exception):
    pass


class Downloader:
    def __init__(self, manifest: Manifest, cache: RepoCache, fetcher: Fetcher, progress: Progress,
                 peers=None):
        self.manifest, self.cache, self.fetcher, self.progress = manifest, cache, fetcher, progress
        self.peers = peers  # peer_fetch.Peers, or None: every file from the Hub
        self.ledger = Ledger(cache.storage / protocol.LEDGER_NAME)

    def ensure(self, spec: FileSpec, via_peers: bool = False) -> None:
        """Make one file present, verified and linked (the unit of work of a worker thread)."""
        if self.progress.stop_event.is_set():
            raise Stopped()
        with etag_lock(self.cache.locks / f"{spec.etag}.lock", self.progress.stop_event):
            if not self._blob_is_verified(spec):
                self._download_verified(spec, self.peers if via_peers else None)
            for leftover in [self.cache.partial(spec.etag), *self.cache.orphans(spec.etag)]:
                leftover.unlink(missing_ok=True)
        self.cache.link(self.manifest.sha, spec)
        self.progress.file_done(spec)

    def _blob_is_verified(self, spec: FileSpec) -> bool:
        blob = self.cache.blob(spec.etag)
        try:
            st = blob.stat()
        except FileNotFoundError:
            return False
        if st.st_size == spec.size and self.ledger.vouches_for(spec.etag, st):
            return True
        if st.st_size == spec.size and hash_file(blob, spec) == spec.etag:
            log(f"{spec.path}: existing blob hashed and verified")
            self.ledger.record(spec.etag, blob)
            return True
        log(f"{spec.path}: existing blob fails verification; fetching it again")
        blob.unlink()
        return False

    def _download_verified(self, spec: FileSpec, peers=None) -> None:
        """From the Hub, or from peers (which raise NotYet/UseHub when they cannot serve it)."""
        digest = None
        if peers:
            peers.ready(spec)  # before hashing a partial: waiting for a peer must stay cheap
        for attempt in range(1, VERIFY_ATTEMPTS + 1):
            partial = self.cache.partial(spec.etag)
            self._adopt_orphan(spec, partial)
            part = PartialBlob(partial, spec, self.progress)
            if part.have:
                log(f"{spec.path}: resuming from byte {part.have} of {spec.size}")
            (peers or self.fetcher).fetch(spec, part)
            digest = part.hasher.hexdigest()
            if digest == spec.etag:
                os.chmod(partial, 0o644)
                os.replace(partial, self.cache.blob(spec.etag))
                self.ledger.record(spec.etag, self.cache.blob(spec.etag))
                log(f"{spec.path}: verified ({spec.algorithm}, {spec.size} bytes)")
                return
            log(f"{spec.path}: {spec.algorithm} mismatch (attempt {attempt}/{VERIFY_ATTEMPTS}); refetching")
            partial.unlink()
            self.progress.partial(spec, 0)
            if peers:
                peers.mismatch(spec, part)
        raise DownloadError(f"{spec.path}: {spec.algorithm} mismatch after {VERIFY_ATTEMPTS} downloads "
                            f"(expected {spec.etag}, got {digest})")

    def _adopt_orphan(self, spec: FileSpec, partial: Path) -> None:
        orphans = sorted(self.cache.orphans(spec.etag), key=lambda p: p.stat().st_size, reverse=True)
        have = partial.stat().st_size if partial.exists() else -1
        if orphans and orphans[0].stat().st_size > have:
            log(f"{spec.path}: adopting huggingface_hub partial {orphans[0].name} "
                f"({orphans[0].stat().st_size} bytes)")
            os.replace(orphans.pop(0), partial)
        for orphan in orphans:
            orphan.unlink(missing_ok=True)


class etag_lock:
    """fcntl lock on .locks/<repo>/<etag>.lock, the file huggingface_hub's FileLock uses, so a
    concurrent huggingface_hub download of the same blob is waited for rather than raced."""

    def __init__(self, path: Path, stop_event: threading.Event):
        self.path, self.stop_event = path, stop_event

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o664)
        waited = False
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                if not waited:
                    log(f"waiting for another process holding {self.path.name}")
                    waited = True
                if self.stop_event.wait(0.5):
                    os.close(self.fd)
                    raise Stopped() from None

    def __exit__(self, *exc):
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def hash_file(path: Path, spec: FileSpec) -> str:
    hasher = spec.new_hasher()
    with open(path, "rb") as f:
        while chunk := f.read(8 << 20):
            hasher.update(chunk)
    return hasher.hexdigest()


def check_free_space(cache: RepoCache, files: list[FileSpec]) -> None:
    needed = 0
    for spec in files:
        if not cache.blob(spec.etag).exists():
            partial = cache.partial(spec.etag)
            needed += spec.size - (partial.stat().st_size if partial.exists() else 0)
    free = shutil.disk_usage(cache.blobs).free
    if needed > free:
        raise DownloadError(f"not enough free space in {cache.blobs}: need {needed} more bytes, {free} free")


def run(manifest: Manifest, hf_home: str, progress: Progress, token: str | None) -> None:
    cache = RepoCache(hf_home, manifest.repo)
    cache.write_ref(manifest.revision, manifest.sha)
    cache.write_tree(manifest.sha, manifest.files)
    check_free_space(cache, manifest.files)
    peers = load_peers(manifest, progress)
    downloader = Downloader(manifest, cache, Fetcher(manifest, token, progress.stop_event), progress, peers)
    ensure = download_call(downloader.ensure)
    if peers is not None:
        errors = peers.schedule(manifest.files, ensure, manifest.max_workers, describe_error)
    else:
        errors = []
        with concurrent.futures.ThreadPoolExecutor(manifest.max_workers, thread_name_prefix="fetch") as pool:
            futures = {pool.submit(ensure, spec): spec for spec in manifest.files}
            for future in concurrent.futures.as_completed(futures):
                error = future.exception() and describe_error(futures[future], future.exception())
                if error:
                    errors.append(error)
    if progress.stop_event.is_set():
        raise DownloadError("stopped by a signal")
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise DownloadError(sorted(errors)[0] + more)


def describe_error(spec: FileSpec, error: BaseException) -> str | None:
    if isinstance(error, DownloadError):
        return str(error)
    if isinstance(error, Stopped):
        return None
    return f"{spec.path}: {type(error).__name__}: {error}"


def load_peers(manifest: Manifest, progress: Progress):
    """peer_fetch.Peers for a manifest with a `peers` block (k3deploy.cluster.fanout), else None."""
    if not manifest.peers:
        return None
    import peer_fetch
    try:
        return peer_fetch.load(manifest.peers, progress.stop_event, Stopped, log, progress.bad_peers)
    except (OSError, KeyError, TypeError, ValueError) as e:
        raise BadInput(f"manifest peers block or secret file: {e}") from None


def download_call(fn):
    """Flag requests as downloads (the Hub's download counter) when this huggingface_hub knows how."""
    try:
        from huggingface_hub.utils._http import flag_as_download_call
        return flag_as_download_call(fn)
    except ImportError:
        return fn


def hold_run_lock(hf_home: str, repo: str):
    """One fetch_weights per cache and repo; returns the open lock fd, or None if another holds it."""
    locks = Path(hf_home) / "hub" / ".locks" / protocol.cache_folder(repo)
    locks.mkdir(parents=True, exist_ok=True)
    fd = os.open(locks / "k3deploy-fetch-weights.lock", os.O_RDWR | os.O_CREAT, 0o664)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def parse_args(argv):
    parser = argparse.ArgumentParser(description="Verified, resumable Hub download into the HF cache.")
    parser.add_argument("--manifest", required=True, help="JSON: repo, revision, sha, endpoint, max_workers, files")
    parser.add_argument("--hf-home", required=True, help="HF_HOME; the cache goes to HF_HOME/hub")
    parser.add_argument("--progress", required=True, help="progress JSON, rewritten about once a second")
    parser.add_argument("--env-file", help="0600 file with HF_TOKEN=...")
    return parser.parse_args(argv)


def finish(progress: Progress, state: str, error: str | None, code: int) -> int:
    progress.state, progress.error = state, error
    progress.stop_event.set()
    progress.write()
    if error:
        print(f"fetch_weights: error: {error}", file=sys.stderr, flush=True)
    return code


def main(argv=None) -> int:
    args = parse_args(argv)
    Path(args.progress).parent.mkdir(parents=True, exist_ok=True)
    try:
        manifest = Manifest.load(args.manifest)
        token = read_token(args.env_file)
    except BadInput as e:
        return finish(Progress(Path(args.progress), []), "failed", str(e), EXIT_BAD_INPUT)
    progress = Progress(Path(args.progress), manifest.files)
    # huggingface_hub reads these at import time; the agent-registry probe must go to this endpoint too
    os.environ["HF_ENDPOINT"], os.environ["HF_HOME"] = manifest.endpoint, args.hf_home
    if os.environ.get("HF_HUB_ENABLE_HF_TRANSFER"):
        log("note: HF_HUB_ENABLE_HF_TRANSFER is a no-op in huggingface_hub >= 1.0; using ranged HTTP")
    try:
        import huggingface_hub
    except ImportError as e:
        return finish(progress, "failed", f"huggingface_hub is not importable: {e}", EXIT_BAD_INPUT)
    run_lock = hold_run_lock(args.hf_home, manifest.repo)
    if run_lock is None:
        print("fetch_weights: error: another fetch_weights is already running on this cache", file=sys.stderr)
        return EXIT_BUSY
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: progress.stop_event.set())
    total = sum(f.size for f in manifest.files)
    log(f"{manifest.repo}@{manifest.sha} from {manifest.endpoint}: {len(manifest.files)} files, {total} bytes, "
        f"{manifest.max_workers} workers, ranged HTTP via huggingface_hub {huggingface_hub.__version__}"
        f" (token: {'yes' if token else 'no'})")
    progress.write()
    progress.run_reporter()
    try:
        run(manifest, args.hf_home, progress, token)
    except DownloadError as e:
        return finish(progress, "failed", str(e), EXIT_FAILED)
    except BadInput as e:
        return finish(progress, "failed", str(e), EXIT_BAD_INPUT)
    except Exception as e:  # the one-line reason beats a traceback in a log nobody reads in full
        return finish(progress, "failed", f"{type(e).__name__}: {e}", EXIT_FAILED)
    log(f"done: {len(manifest.files)} files verified and linked in {time.time() - progress.started:.1f}s")
    return finish(progress, "done", None, EXIT_OK)


if __name__ == "__main__":
    sys.exit(main())

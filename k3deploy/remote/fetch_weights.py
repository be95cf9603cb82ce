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
  - each file goes to `blobs/<etag>.k3deploy-partial` (protocol.partial_path; not `.incomplete`,
    which `hf cache prune` deletes), filled by several `Range: bytes=A-B` connections at once; the
    record beside it (`.ranges.json`, remote/fetch_ranges.py) names every finished range, so a
    re-run fetches only the gaps (a 200 instead of a 206: the server ignored the range, and the
    bytes before it are read past); the bytes it holds are its allocated blocks
    (protocol.partial_bytes);
  - an orphaned huggingface_hub partial of the same blob (`<etag>.<8 hex>.incomplete`, or
    `<etag>.incomplete` from <= 1.17) is adopted (renamed to ours) first, as a prefix;
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

This file is the entry: the verify-and-link loop over the worker pool. Its modules are uploaded
next to it (protocol.DOWNLOADER_FILES): fetch_manifest (input), fetch_cache (cache layout,
ledger, locks), fetch_hub (partial blobs, ranged Hub GETs), fetch_progress (the polled
document), fetch_base (errors, log, atomic writes), peer_fetch (the peer source).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:   # imported at run time only when the manifest names peers (load_peers)
    from peer_fetch import Peers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # its modules ship next to it
sys.dont_write_bytecode = True  # no __pycache__ in the node's k3deploy dir
from fetch_base import (BadInput, DiskFault, DownloadError, HubUnavailable, Stopped, log,  # noqa: E402
                        raise_first)
from fetch_cache import (Ledger, RepoCache, check_free_space, disk_fault, etag_lock,  # noqa: E402
                         hash_file, hold_run_lock)
from fetch_conns import Connections  # noqa: E402
from fetch_hub import HubSource  # noqa: E402
from fetch_manifest import FileSpec, Manifest, read_token  # noqa: E402
from fetch_progress import Progress  # noqa: E402
from fetch_ranges import PartialBlob  # noqa: E402
from fetch_retry import Gate  # noqa: E402
import fetch_workers  # noqa: E402
from thread_pool import pool  # noqa: E402

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_BUSY = 0, 1, 2, 3
_Call = TypeVar("_Call", bound=Callable[..., None])
VERIFY_ATTEMPTS = 3        # full fetches of one file whose hash keeps mismatching


class Downloader:
    def __init__(self, manifest: Manifest, cache: RepoCache, fetcher: Connections, progress: Progress,
                 peers: Peers | None = None):
        self.manifest, self.cache, self.fetcher, self.progress = manifest, cache, fetcher, progress
        self.peers = peers  # peer_fetch.Peers, or None: every file from the Hub
        self.ledger = Ledger(cache.ledger, cache.locks)
        self.disk_fault: DiskFault | None = None   # the first one: every later file fails with it

    def ensure(self, spec: FileSpec, via_peers: bool = False) -> None:
        """Make one file present, verified and linked (the unit of work of a worker thread)."""
        if self.progress.stop_event.is_set():
            raise Stopped()
        if self.disk_fault is not None:
            raise self.disk_fault
        try:
            self._ensure(spec, via_peers)
        except DiskFault as e:
            self.disk_fault = self.disk_fault or e
            raise

    def _ensure(self, spec: FileSpec, via_peers: bool) -> None:
        with etag_lock(self.cache.locks / f"{spec.etag}.lock", self.progress.stop_event):
            try:
                if not self._blob_is_verified(spec):
                    self._download_verified(spec, self.peers if via_peers else None)
            except HubUnavailable:
                self.progress.hub_unavailable.add(spec.path)
                raise
            for leftover in [self.cache.partial(spec.etag), self.cache.ranges(spec.etag),
                             *self.cache.orphans(spec.etag)]:
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

    def _download_verified(self, spec: FileSpec, peers: Peers | None = None) -> None:
        """From the Hub, or from peers (which raise NotYet/UseHub when they cannot serve it)."""
        digest = None
        if peers:
            peers.ready(spec)  # before hashing a partial: waiting for a peer must stay cheap
        for attempt in range(1, VERIFY_ATTEMPTS + 1):
            partial = self.cache.partial(spec.etag)
            self._adopt_orphan(spec, partial)
            part = PartialBlob(partial, spec, self.progress, self.cache.ranges(spec.etag))
            if part.have:
                log(f"{spec.path}: resuming with {part.have} of {spec.size} bytes on disk")
            # A run killed between a file's last byte and its rename left it whole: a peer
            # would answer the range `bytes=<size>-` with 416 (and be taken for broken).
            if part.have < spec.size:
                (peers or self.fetcher).fetch(spec, part)
            digest = part.digest()
            if digest == spec.etag:
                os.chmod(partial, 0o644)
                os.replace(partial, self.cache.blob(spec.etag))
                self.ledger.record(spec.etag, self.cache.blob(spec.etag))
                log(f"{spec.path}: verified ({spec.algorithm}, {spec.size} bytes)")
                return
            log(f"{spec.path}: {spec.algorithm} mismatch (attempt {attempt}/{VERIFY_ATTEMPTS}); refetching")
            part.discard()
            self.progress.partial(spec, 0)
            if peers:
                peers.mismatch(spec, part)
        raise DownloadError(f"{spec.path}: {spec.algorithm} mismatch after {VERIFY_ATTEMPTS} downloads "
                            f"(expected {spec.etag}, got {digest})")

    def _adopt_orphan(self, spec: FileSpec, partial: Path) -> None:
        orphans = sorted(self.cache.orphans(spec.etag), key=lambda p: p.stat().st_size, reverse=True)
        # Ours with a record may hold ranges past its prefix: its length says nothing then.
        have = spec.size if self.cache.ranges(spec.etag).exists() else \
            partial.stat().st_size if partial.exists() else -1
        if orphans and orphans[0].stat().st_size > have:
            log(f"{spec.path}: adopting huggingface_hub partial {orphans[0].name} "
                f"({orphans[0].stat().st_size} bytes)")
            os.replace(orphans.pop(0), partial)
        for orphan in orphans:
            orphan.unlink(missing_ok=True)


def run(manifest: Manifest, args: argparse.Namespace, progress: Progress, token: str | None) -> None:
    """The whole download (the parent, or the only process), or one worker's share of it."""
    cache = RepoCache(args.hf_home, manifest.repo)
    if args.worker is None:
        cache.write_tree(manifest.sha, manifest.files)
        check_free_space(cache, manifest.files)
    progress.processes = 1 if args.worker else fetch_workers.count(manifest)
    if progress.processes > 1:
        fetch_workers.run(os.path.abspath(__file__), manifest, args, cache, progress)
    else:
        here(manifest, cache, progress, token)
    if args.worker is None:
        cache.write_refs(manifest.revision, manifest.sha)


def here(manifest: Manifest, cache: RepoCache, progress: Progress, token: str | None) -> None:
    """Every file of the manifest in this process."""
    peers = load_peers(manifest, progress)
    downloader = Downloader(manifest, cache, hub_connections(manifest, token, progress), progress, peers)
    ensure = download_call(downloader.ensure)
    if peers is not None:
        import peer_schedule
        errors = peer_schedule.schedule(peers, manifest.files, ensure, manifest.max_workers,
                                        describe_error)
    else:
        errors = []
        with pool(manifest.max_workers, "fetch") as workers:
            futures = {workers.submit(ensure, spec): spec for spec in manifest.files}
            for future in concurrent.futures.as_completed(futures):
                exc = future.exception()
                error = describe_error(futures[future], exc) if exc is not None else None
                if error:
                    errors.append(error)
    if progress.stop_event.is_set():
        raise DownloadError("stopped by a signal")
    if downloader.disk_fault is not None:   # partials stay: a re-run with room resumes them
        raise disk_fault(cache, manifest.files, downloader.disk_fault)
    raise_first(errors, len(progress.hub_unavailable) == len(errors))


def hub_connections(manifest: Manifest, token: str | None, progress: Progress) -> Connections:
    source = HubSource(manifest, token, progress.stop_event, Gate(progress.stop_event))
    return Connections(source, manifest.connections, manifest.segment_bytes, manifest.retry_seconds,
                       manifest.replace_per_second, progress.stop_event)


def describe_error(spec: FileSpec, error: BaseException) -> str | None:
    if isinstance(error, DownloadError):
        return str(error)
    if isinstance(error, Stopped):
        return None
    return f"{spec.path}: {type(error).__name__}: {error}"


def load_peers(manifest: Manifest, progress: Progress) -> Peers | None:
    """peer_fetch.Peers for a manifest with a `peers` block (k3deploy.cluster.fanout), else None."""
    if not manifest.peers:
        return None
    import peer_fetch
    try:
        return peer_fetch.load(manifest.peers, progress.stop_event, Stopped, log, progress.bad_peers)
    except (OSError, KeyError, TypeError, ValueError) as e:
        raise BadInput(f"manifest peers block or secret file: {e}") from None


def download_call(fn: _Call) -> _Call:
    """Flag requests as downloads (the Hub's download counter) when this huggingface_hub knows how."""
    try:
        from huggingface_hub.utils._http import flag_as_download_call
        return flag_as_download_call(fn)
    except ImportError:
        return fn


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Verified, resumable Hub download into the HF cache.")
    parser.add_argument("--manifest", required=True, help="JSON: repo, revision, sha, endpoint, max_workers, files")
    parser.add_argument("--hf-home", required=True, help="HF_HOME; the cache goes to HF_HOME/hub")
    parser.add_argument("--progress", required=True, help="progress JSON, rewritten about once a second")
    parser.add_argument("--env-file", help="0600 file with HF_TOKEN=...")
    parser.add_argument("--worker", metavar="I/N", help="internal: worker I of N started by a downloader "
                        "(fetch_workers.py), fetching its share of the files")
    return parser.parse_args(argv)


def finish(progress: Progress, state: str, error: str | None, code: int) -> int:
    progress.state, progress.error = state, error
    progress.stop_event.set()
    progress.write()
    if error:
        try:
            print(f"fetch_weights: error: {error}", file=sys.stderr, flush=True)
        except OSError:   # stderr is the log on the node's disk, which may be full
            pass
    return code


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    Path(args.progress).parent.mkdir(parents=True, exist_ok=True)
    try:
        manifest = Manifest.load(args.manifest)
        token = read_token(args.env_file)
    except BadInput as e:
        return finish(Progress(Path(args.progress), []), "failed", str(e), EXIT_BAD_INPUT)
    if args.worker:
        fetch_workers.as_worker(manifest, args.worker)
    progress = Progress(Path(args.progress), manifest.files, detail=bool(args.worker))
    # huggingface_hub reads these at import time; the agent-registry probe must go to this endpoint too
    os.environ["HF_ENDPOINT"], os.environ["HF_HOME"] = manifest.endpoint, args.hf_home
    if os.environ.get("HF_HUB_ENABLE_HF_TRANSFER"):
        log("note: HF_HUB_ENABLE_HF_TRANSFER is a no-op in huggingface_hub >= 1.0; using ranged HTTP")
    try:
        import huggingface_hub
    except ImportError as e:
        return finish(progress, "failed", f"huggingface_hub is not importable: {e}", EXIT_BAD_INPUT)
    run_lock = True if args.worker else hold_run_lock(args.hf_home, manifest.repo)  # the parent holds it
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
        run(manifest, args, progress, token)
    except DownloadError as e:
        progress.transient = isinstance(e, HubUnavailable)
        progress.disk = e.document() if isinstance(e, DiskFault) else None
        return finish(progress, "failed", str(e), EXIT_FAILED)
    except BadInput as e:
        return finish(progress, "failed", str(e), EXIT_BAD_INPUT)
    except Exception as e:  # the one-line reason beats a traceback in a log nobody reads in full
        return finish(progress, "failed", f"{type(e).__name__}: {e}", EXIT_FAILED)
    log(f"done: {len(manifest.files)} files verified and linked in {time.time() - progress.started:.1f}s")
    return finish(progress, "done", None, EXIT_OK)


if __name__ == "__main__":
    sys.exit(main())

"""Node side: how much of the pinned snapshot is verified, and is a download running.

Reads the manifest (JSON) on stdin; argv: HF_HOME PROGRESS_FILE PID_FILE [PEER_PID_FILE
PEER_MANIFEST PEER_SECRET_FILE]. Prints one JSON object. Stdlib only, and cheap: it stats files
and reads fetch_weights' ledger; it hashes only the peer server's two small input files.
"""

import hashlib
import json
import os
import sys

import protocol  # bundled ahead of this program (k3deploy.remote.bundled)


def verified_files(manifest: protocol.ManifestDoc, hf_home: str) -> tuple[list[str], int, int]:
    storage = protocol.cache_storage(hf_home, manifest["repo"])
    try:
        with open(protocol.ledger_path(storage)) as fh:
            ledger = protocol.json_object(fh.read()) or {}
    except (OSError, ValueError):
        ledger = {}
    missing: list[str] = []
    partial, done_bytes = 0, 0
    for f in manifest["files"]:
        etag = f.get("sha256") or f["oid"]
        blob = protocol.blob_path(storage, etag)
        link = protocol.snapshot_path(storage, manifest["sha"], f["path"])
        try:
            st = os.stat(blob)
            ok = (st.st_size == f["size"]
                  and protocol.ledger_vouches(ledger.get(etag), st.st_size, st.st_mtime_ns)
                  and _points_at(link, blob))
        except OSError:
            ok = False
        if ok:
            done_bytes += f["size"]
            continue
        missing.append(f["path"])
        try:
            partial += protocol.partial_bytes(protocol.partial_path(storage, etag))
        except OSError:
            pass
    return missing, partial, done_bytes


def _points_at(link: str, blob: str) -> bool:
    """The snapshot link leads to the blob. The downloader writes the relative link
    huggingface_hub writes (one readlink tells); any other link is resolved in full."""
    try:
        target = os.readlink(link)
    except OSError:
        return False
    if os.path.normpath(os.path.join(os.path.dirname(link), target)) == os.path.normpath(blob):
        return True
    return os.path.realpath(link) == os.path.realpath(blob)


def downloader(progress_path: str, pid_path: str) -> protocol.Reading:
    """The progress document and its writer (protocol.read_document, the reading `status`
    runs too). The pid file is written by the start command itself, so a downloader that has
    not yet written its first progress is already seen as running."""
    return protocol.read_document(progress_path, protocol.DOWNLOADER, pid_path)


def _sha256(path: str) -> str | None:
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except OSError:
        return None


def peer_server(pid_path: str, manifest_path: str, secret_path: str) -> protocol.Doc:
    """Is the peer server running, and with which manifest and secret (their hashes: the laptop
    compares them with what this run would start it with)."""
    try:
        with open(pid_path) as fh:
            pid: str | None = fh.read().strip()
    except OSError:
        pid = None
    return {"running": protocol.process_runs(pid, "peer_server.py"),
            "manifest_sha256": _sha256(manifest_path),
            "secret_sha256": _sha256(secret_path)}


def main() -> None:
    try:
        manifest: protocol.ManifestDoc = protocol.check_schema(json.load(sys.stdin), "manifest")
    except protocol.SchemaMismatch as e:
        sys.exit(f"weights_status: {e}")
    seen = downloader(sys.argv[2], sys.argv[3])
    progress, alive = seen.doc, seen.alive
    try:
        if progress is not None:
            protocol.check_schema(progress, "progress file")
    except protocol.SchemaMismatch:
        # Left by a downloader of another k3deploy version (an upgrade mid-download): its numbers
        # are not ours to read, but the files it verified are, so the download goes on.
        progress = None
    missing, partial, done_bytes = verified_files(manifest, sys.argv[1])
    found: protocol.Doc = {"total": len(manifest["files"]), "missing_count": len(missing),
             "missing": [*missing[:5]], "partial_bytes": partial,
             "verified_bytes": done_bytes, "running": alive, "progress": progress,
             "downloader": {k: v for k, v in seen.document().items() if k != "doc"}}
    if len(sys.argv) > 6:
        found["peer"] = peer_server(*sys.argv[4:7])
    print(json.dumps(found))


if __name__ == "__main__":
    main()

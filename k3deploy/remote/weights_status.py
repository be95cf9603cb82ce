"""Node side: how much of the pinned snapshot is verified, and is a download running.

Reads the manifest (JSON) on stdin; argv: HF_HOME PROGRESS_FILE PID_FILE. Prints one JSON object.
Stdlib only, and cheap: it stats files and reads fetch_weights' ledger; it hashes nothing.
"""

import json
import os
import sys


def verified_files(manifest, hf_home):
    storage = os.path.join(hf_home, "hub", "models--" + manifest["repo"].replace("/", "--"))
    try:
        with open(os.path.join(storage, ".k3deploy-verified.json")) as fh:
            ledger = json.load(fh)
    except (OSError, ValueError):
        ledger = {}
    missing, partial, done_bytes = [], 0, 0
    for f in manifest["files"]:
        etag = f.get("sha256") or f["oid"]
        blob = os.path.join(storage, "blobs", etag)
        link = os.path.join(storage, "snapshots", manifest["sha"], f["path"])
        entry = ledger.get(etag) or {}
        try:
            st = os.stat(blob)
            ok = (st.st_size == f["size"] == entry.get("size")
                  and st.st_mtime_ns == entry.get("mtime_ns")
                  and os.path.realpath(link) == os.path.realpath(blob))
        except OSError:
            ok = False
        if ok:
            done_bytes += f["size"]
            continue
        missing.append(f["path"])
        try:
            partial += os.stat(blob + ".incomplete").st_size
        except OSError:
            pass
    return missing, partial, done_bytes


def _alive(pid):
    try:
        with open(f"/proc/{int(pid)}/cmdline", "rb") as fh:
            return b"fetch_weights" in fh.read()
    except (OSError, TypeError, ValueError):
        return False


def downloader(progress_path, pid_path):
    """The pid file is written by the start command itself, so a downloader that has not yet
    written its first progress is already seen as running."""
    try:
        with open(progress_path) as fh:
            progress = json.load(fh)
    except (OSError, ValueError):
        progress = None
    try:
        with open(pid_path) as fh:
            started = fh.read().strip()
    except OSError:
        started = None
    return progress, _alive(started) or _alive((progress or {}).get("pid"))


def main():
    manifest = json.load(sys.stdin)
    missing, partial, done_bytes = verified_files(manifest, sys.argv[1])
    progress, alive = downloader(sys.argv[2], sys.argv[3])
    print(json.dumps({"total": len(manifest["files"]), "missing_count": len(missing),
                      "missing": missing[:5], "partial_bytes": partial,
                      "verified_bytes": done_bytes, "running": alive, "progress": progress}))


if __name__ == "__main__":
    main()

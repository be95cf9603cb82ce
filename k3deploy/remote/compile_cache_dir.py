"""One key's compile-cache dir on a node: checked before the engine starts, sealed once verify
passed, filled from a peer when this node has none. Standard library only; uploaded to the
work dir by the compile-cache steps (steps/engine/compile_cache_prepare.py).

Files in DIR besides the engines' own: SUMS (every file's size and sha256 when sealed) and
COMPLETE (the key's inputs; written last, so a dir without it was never sealed).

usage: compile_cache_dir.py check DIR
       compile_cache_dir.py prepare DIR [--peers IP,IP] [--port P] [--secret-file F]
       compile_cache_dir.py seal DIR INPUTS_JSON
Each prints one JSON document: check/prepare {"state", "files", "bad", "pruned", "from"}.
"""
import argparse
import hashlib
import http.client
import json
import os
import shutil
import sys
import time
from typing import TypeAlias

# protocol.JSON's: this program is uploaded alone, without its siblings
JSON: TypeAlias = dict[str, "JSON"] | list["JSON"] | str | int | float | bool | None
Doc: TypeAlias = dict[str, JSON]

SUMS, COMPLETE = ".k3deploy-sums.json", ".k3deploy-complete.json"
OWN = (SUMS, COMPLETE)


def sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def files_of(root: str) -> list[str]:
    found = []
    for base, _dirs, names in os.walk(root):
        for name in names:
            rel = os.path.relpath(os.path.join(base, name), root)
            if rel not in OWN:
                found.append(rel)
    return sorted(found)


def read_json(path: str) -> JSON:
    try:
        with open(path, encoding="utf-8") as fh:
            doc: JSON = json.load(fh)
            return doc
    except (OSError, ValueError):
        return None


def missed_marker(root: str) -> str:
    return root.rstrip("/") + ".peer-miss"


def check(root: str, prune: bool = False) -> Doc:
    """absent | missed (absent, no peer had it) | incomplete | corrupt | complete. Files the
    engines wrote after the seal are not vouched for: removed when pruning."""
    if not os.path.isdir(root):
        return {"state": "missed" if os.path.exists(missed_marker(root)) else "absent"}
    sums = read_json(os.path.join(root, SUMS))
    if read_json(os.path.join(root, COMPLETE)) is None or not isinstance(sums, dict):
        return {"state": "incomplete", "files": len(files_of(root))}
    bad = [rel for rel, want in sorted(sums.items()) if not _matches(root, rel, want)]
    extra = [rel for rel in files_of(root) if rel not in sums]
    if prune and not bad:
        for rel in extra:
            os.unlink(os.path.join(root, rel))
    return {"state": "corrupt" if bad else "complete", "files": len(sums), "bad": [*bad[:10]],
            "pruned": len(extra) if prune and not bad else 0}


def _matches(root: str, rel: str, want: JSON) -> bool:
    if not isinstance(want, dict):
        return False
    path = os.path.join(root, rel)
    try:
        return os.path.getsize(path) == want["size"] and sha256(path) == want["sha256"]
    except (OSError, KeyError, TypeError):
        return False


def seal(root: str, inputs: JSON) -> Doc:
    found = check(root)
    if found["state"] == "complete":
        return found
    if found["state"] in ("absent", "missed"):
        return found  # nothing was compiled into it (or the engine keeps no cache here)
    sums: Doc = {rel: {"size": os.path.getsize(os.path.join(root, rel)),
                  "sha256": sha256(os.path.join(root, rel))} for rel in files_of(root)}
    _write_json(os.path.join(root, SUMS), sums)
    _write_json(os.path.join(root, COMPLETE), {"inputs": inputs, "sealed_at": time.time()})
    if os.path.exists(missed_marker(root)):
        os.unlink(missed_marker(root))
    return {"state": "complete", "files": len(sums), "sealed": True}


def _write_json(path: str, doc: JSON) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def prepare(root: str, peers: list[str], port: int, secret: str | None) -> Doc:
    """Before the engine starts: a complete cache is pruned to what was sealed; a torn or
    corrupt one removed (the engine rebuilds it, never loads it); none: from a peer."""
    found = check(root, prune=True)
    if found["state"] in ("incomplete", "corrupt"):
        shutil.rmtree(root)
        found = {**found, "removed": True, "state": "absent"}
    if found["state"] != "absent":
        return found
    for peer in peers:
        got = fetch(root, peer, port, secret)
        if got:
            return {**found, "state": "complete", "from": peer, "files": got}
    open(missed_marker(root), "w").close()
    return {**found, "state": "missed", "tried": [*peers]}


def _get(peer: str, port: int, secret: str | None, path: str) -> bytes | None:
    conn = http.client.HTTPConnection(peer, port, timeout=30)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {secret}"} if secret else {})
        resp = conn.getresponse()
        body = resp.read()
        return body if resp.status == 200 else None
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def fetch(root: str, peer: str, port: int, secret: str | None) -> int:
    """The peer's sealed dir of the same key, every file checked against its SUMS before the
    dir is put in place; 0 when that peer has none or sent a bad byte."""
    key = os.path.basename(root.rstrip("/"))
    raw = _get(peer, port, secret, f"/compile-cache/{key}/{SUMS}")
    complete = _get(peer, port, secret, f"/compile-cache/{key}/{COMPLETE}")
    if not raw or not complete:
        return 0
    sums: JSON
    try:
        sums = json.loads(raw)
    except ValueError:
        sums = None
    if not isinstance(sums, dict):
        return 0
    partial = root.rstrip("/") + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    for rel, want in sorted(sums.items()):
        body = _get(peer, port, secret, f"/compile-cache/{key}/f/{rel}")
        wanted = want.get("sha256") if isinstance(want, dict) else None
        if body is None or hashlib.sha256(body).hexdigest() != wanted:
            shutil.rmtree(partial, ignore_errors=True)
            return 0
        path = os.path.join(partial, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(body)
    os.makedirs(partial, exist_ok=True)
    _write_json(os.path.join(partial, SUMS), sums)
    with open(os.path.join(partial, COMPLETE), "wb") as fh:
        fh.write(complete)
    os.replace(partial, root)
    return len(sums)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="compile_cache_dir.py")
    parser.add_argument("command", choices=("check", "prepare", "seal"))
    parser.add_argument("dir")
    parser.add_argument("inputs", nargs="?", help="seal: the key's inputs as JSON")
    parser.add_argument("--peers", default="")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--secret-file")
    args = parser.parse_args(argv)
    if args.command == "check":
        out = check(args.dir)
    elif args.command == "seal":
        out = seal(args.dir, json.loads(args.inputs or "{}"))
    else:
        secret = None
        if args.secret_file and os.path.exists(args.secret_file):
            with open(args.secret_file, encoding="utf-8") as fh:
                secret = fh.read().strip()
        os.makedirs(os.path.dirname(args.dir.rstrip("/")), exist_ok=True)
        out = prepare(args.dir, [p for p in args.peers.split(",") if p], args.port, secret)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The peer server's compile-cache route: a replaced or added node takes a sealed compile
cache from a peer, as it takes the weights (remote/compile_cache_dir.py fetches and checks every
file against the sums). Only a sealed dir is served, and in it only SUMS, COMPLETE and the
files SUMS lists; anything else is 404. Standard library only; uploaded beside peer_server.py.

GET /compile-cache/<key>/.k3deploy-sums.json | /.k3deploy-complete.json | /f/<path>
"""
import json
import os
import re

_PATH = re.compile(r"^/compile-cache/([0-9a-f]{16})/(.+)$")
SUMS, COMPLETE = ".k3deploy-sums.json", ".k3deploy-complete.json"


def resolve(root: str | None, url_path: str) -> str | None:
    """The file to send for this path, or None (not sealed, not listed, not this route)."""
    match = _PATH.match(url_path)
    if not root or not match:
        return None
    key_dir = os.path.join(root, match.group(1))
    if not os.path.isfile(os.path.join(key_dir, COMPLETE)):
        return None
    rest = match.group(2)
    if rest in (SUMS, COMPLETE):
        return os.path.join(key_dir, rest)
    if not rest.startswith("f/"):
        return None
    try:
        with open(os.path.join(key_dir, SUMS), encoding="utf-8") as fh:
            listed = json.load(fh)
    except (OSError, ValueError):
        return None
    rel = rest[2:]
    return os.path.join(key_dir, rel) if isinstance(listed, dict) and rel in listed else None

"""A node command's output as JSON: the whole of it (a file, a tool's --format json), or its
last line (programs log freely, then print their one result document last)."""

from __future__ import annotations

import json

from k3deploy.remote.protocol import JSON


def last_json_line(out: str) -> object:
    """The parsed last non-blank line; None when there is none or it is not JSON."""
    lines = out.strip().splitlines()
    try:
        return json.loads(lines[-1]) if lines else None
    except ValueError:
        return None


def json_doc(out: str, code: int) -> object:
    """The output as one JSON document; None when the command failed or printed no JSON."""
    if code != 0:
        return None
    try:
        return json.loads(out)
    except ValueError:
        return None


def json_object(out: str, code: int) -> dict[str, JSON] | None:
    """The output as one JSON object; None when it failed, or holds no object."""
    doc = json_doc(out, code)
    return doc if isinstance(doc, dict) else None

"""The last line of a node program's output as JSON: programs log freely, then print their
one result document last."""

from __future__ import annotations

import json


def last_json_line(out: str) -> object:
    """The parsed last non-blank line; None when there is none or it is not JSON."""
    lines = out.strip().splitlines()
    try:
        return json.loads(lines[-1]) if lines else None
    except ValueError:
        return None

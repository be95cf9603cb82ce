"""sha256 of text, hex: what node-side `sha256sum` prints for the same bytes (UTF-8)."""

from __future__ import annotations

import hashlib


def sha256_text(text: str | None) -> str:
    """None hashes as the empty text (a file that is absent compares as empty)."""
    return hashlib.sha256((text or "").encode()).hexdigest()

"""Secret redaction shared by logs, errors, state files and command echoes.

Known secrets are registered as they are loaded; patterns catch the ones we never saw
(an HF token pasted into an env override, a bearer header in a remote error message).
"""

from __future__ import annotations

import re
import threading

from k3deploy.core.jsonvalue import JSON

MASK = "***"
_PATTERNS = [
    re.compile(r"hf_[A-Za-z0-9]{16,}"),
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}"),
    re.compile(r"(?i)((?:token|api[_-]?key|secret|password)[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]{4,}"),
]
_known: set[str] = set()
_lock = threading.Lock()


def register(secret: str | None) -> None:
    """Remember a secret so every later redact() hides it. Short values are ignored:
    masking 'ab' everywhere would make logs unreadable and protects nothing."""
    if secret and len(secret) >= 6:
        with _lock:
            _known.add(secret)


def redact(text: str) -> str:
    if not text:
        return text
    with _lock:
        known = sorted(_known, key=len, reverse=True)
    for secret in known:
        text = text.replace(secret, MASK)
    for pattern in _PATTERNS:
        text = pattern.sub(lambda m: (m.group(1) if m.groups() else "") + MASK, text)
    return text


def redact_obj(value: JSON) -> JSON:
    """Redact every string inside a JSON-like structure."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: redact_obj(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_obj(v) for v in value]
    return value

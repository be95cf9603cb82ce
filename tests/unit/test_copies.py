"""The helpers that had copies: sha256 of text (core/digest.py) equals what `sha256sum` prints
for the same bytes; the last-JSON-line parser (facts/lastjson.py) reads what node programs print
after their log lines."""

from __future__ import annotations

import hashlib
import subprocess

import pytest

from k3deploy.core.digest import sha256_text
from k3deploy.facts.lastjson import last_json_line


def test_sha256_text_is_what_sha256sum_prints_for_the_file():
    text = "api-key: k3-é\n"
    out = subprocess.run(["sha256sum"], input=text.encode(), capture_output=True, check=True)
    assert sha256_text(text) == out.stdout.split()[0].decode()
    assert sha256_text(None) == sha256_text("") == hashlib.sha256(b"").hexdigest()


@pytest.mark.parametrize("out, want", [
    ('log line\n{"probes": {}}\n', {"probes": {}}),
    ('{"a": 1}\n\n  \n', {"a": 1}),
    ("Traceback (most recent call last):\n  ...\nValueError: x\n", None),
    ("", None),
    ("[1, 2]", [1, 2]),
])
def test_last_json_line(out, want):
    assert last_json_line(out) == want

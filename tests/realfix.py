"""The corpus of real tool outputs (tests/fixtures/real/<tool>/<version>/<name>.txt), each
with its source beside it (<name>.source): read one, and compare log lines by their shape."""
from __future__ import annotations

import re
from pathlib import Path

REAL = Path(__file__).resolve().parent / "fixtures" / "real"


def real(path: str) -> str:
    """A fixture's raw text; it must say where it comes from."""
    file = REAL / path
    assert file.with_suffix(".source").is_file(), f"{file} has no .source beside it"
    return file.read_text()


def vllm_shape(line: str) -> str:
    """A vLLM log line without what changes between runs and releases: pid, time, file:line."""
    return re.sub(r"pid=\d+\) (\w+) [\d-]+ [\d:]+ \[[\w/.]+:\d+\]", r"pid=N) \1 T [F]",
                  line.rstrip())

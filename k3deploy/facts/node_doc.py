"""A node document and its writer, as remote/doc_reading.py prints them: the one reading
(k3deploy.remote.protocol.Reading) that `status`, `watch` and the run share. A dead writer's
"still working" reads as protocol.STOPPED, with the state and time it was last seen in."""

from __future__ import annotations

from k3deploy.facts.lastjson import last_json_line
from k3deploy.remote.protocol import UNREADABLE, Reading


def parse_reading(out: str, code: int) -> Reading:
    """doc_reading.py's last line; a program that printed none (python3 missing, a traceback)
    reads as unreadable, with what it said."""
    doc = last_json_line(out)
    if code == 0 and isinstance(doc, dict):
        return Reading.from_document(doc)
    said = out.strip().splitlines()[-1:] or [f"exit code {code}"]
    return Reading(state=UNREADABLE, said=None, alive=False, written=None, age=None, doc=None,
                   error=said[0][-300:])

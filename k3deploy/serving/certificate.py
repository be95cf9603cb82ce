"""The bring-up certificate: what was brought up and how it served, one JSON file per `up`
(after verify) and per `bench`, in .k3deploy/<cluster>/certificates/<UTC time>.json, so two
bring-ups can be compared. Building and reading only; the facts come from certificate_facts.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TypedDict

from k3deploy import __version__
from k3deploy.core.jsonvalue import JSON
from k3deploy.core.redact import redact_obj
from k3deploy.core.state import atomic_write_json

SCHEMA = 1


class ClusterFacts(TypedDict, total=False):
    """What a certificate records of the cluster (certificate_facts.py; a missing key is
    recorded as unknown)."""
    head: dict[str, JSON]                 # the head's record (steps/engine/certify.node_record)
    engine_version: JSON
    config_digests: dict[str, JSON]       # node -> its launch config's digest
    gpu_memory_mib: dict[str, JSON]       # node -> {"rank", "used", "total"}
    started_at: dict[str, JSON]           # node -> its engine container's start
    fabric: JSON                          # the pairwise mesh's last figures, None if never run


def directory(state_dir: Path) -> Path:
    return Path(state_dir) / "certificates"


def flags_of(argv: list[str]) -> dict[str, JSON]:
    """An engine command line's flags: `--name value` -> value, a bare `--name` -> True;
    positional words (the program, `serve`, a model) are left out."""
    flags: dict[str, JSON] = {}
    i = 0
    while i < len(argv):
        word = argv[i]
        if word.startswith("-") and len(word) > 1:
            name, eq, value = word.partition("=")
            if eq:
                flags[name] = value
            elif i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                flags[name] = argv[i + 1]
                i += 1
            else:
                flags[name] = True
        i += 1
    return flags


def build(kind: str, cluster: str, facts: ClusterFacts, *, verify: dict[str, JSON],
          bench: dict[str, JSON] | None = None, bringup: dict[str, JSON] | None = None,
          now: float | None = None) -> dict[str, JSON]:
    now = time.time() if now is None else now
    head = facts.get("head") or {}
    argv = head.get("argv") or []
    return {"schema": SCHEMA, "kind": kind, "cluster": cluster,
            "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
            "versions": {"k3deploy": __version__, "image": head.get("image"),
                         "image_digest": head.get("image_digest"),
                         "engine": facts.get("engine_version")},
            "launch": {"config_digest": head.get("config_digest"),
                       "flags": flags_of([str(a) for a in argv] if isinstance(argv, list) else []),
                       "config_digests": facts.get("config_digests", {})},
            "gpu_memory_mib": facts.get("gpu_memory_mib", {}),
            # verify's image probe on the head (None after `bench`, which does not send it)
            "vision": head.get("vision"),
            # the pairwise mesh's last figures (steps/fabric_mesh.record), None if never run
            "fabric": facts.get("fabric"),
            "verify": verify, "bench": bench, "bringup": bringup}


def write(state_dir: Path, doc: dict[str, JSON], now: float | None = None) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    path = directory(state_dir) / f"{stamp}.json"
    n = 1
    while path.exists():   # two in one second (up, then bench at once): keep both
        path = directory(state_dir) / f"{stamp}-{n}.json"
        n += 1
    atomic_write_json(path, redact_obj(doc), mode=0o644)
    return path


def latest(state_dir: Path) -> Path | None:
    """The newest certificate (names are UTC stamps; `-N` numbers those of one second)."""
    def order(path: Path) -> tuple[str, int]:
        stamp, _, n = path.stem.partition("-")
        return stamp, int(n) if n.isdigit() else 0
    found = sorted(directory(state_dir).glob("*.json"), key=order)
    return found[-1] if found else None


def load(path: str) -> dict[str, JSON]:
    from k3deploy.core.errors import BadInputError
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise BadInputError(f"{path}: no such certificate") from None
    except json.JSONDecodeError as err:
        raise BadInputError(f"{path}: not JSON ({err})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise BadInputError(f"{path}: not a k3deploy certificate (schema {SCHEMA})")
    return doc

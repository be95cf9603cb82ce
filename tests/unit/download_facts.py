"""The download step's facts for unit tests: a node with every file missing and no downloader,
no progress document yet, no token file and no program on it, but for what a test names.
`progress` fields start from a fresh downloader's document; a misspelt field anywhere is a
TypeError (tests/unit/typed.py)."""

from __future__ import annotations

from k3deploy.steps.weights.download import DownloadFacts, DownloadWeights
from tests.unit import typed

STATUS = {"total": 4, "missing_count": 4, "partial_bytes": 0, "verified_bytes": 0,
          "running": False, "progress": None}
PROGRESS = {"error": None, "bytes_total": 0, "bytes_done": 0, "shards_total": 0,
            "shards_done": 0, "hub_bytes": 0, "peer_bytes": 0, "bad_peers": [],
            "transient": False, "disk": None}


def facts(progress: dict | None = None, peer: dict | None = None, token_file: bool = False,
          log: str | None = "", node_files: dict | None = None, shared_marker: str | None = None,
          **status) -> DownloadFacts:
    doc = {**STATUS, **status}
    if progress is not None:
        doc["progress"] = {**PROGRESS, **progress}
    if peer is not None:
        doc["peer"] = peer
    return typed.facts(DownloadWeights, {"status": doc, "token_file": token_file, "log": log,
                                         "node_files": node_files or {},
                                         "shared_marker": shared_marker})

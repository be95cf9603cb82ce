"""What every part of the node-side downloader (fetch_weights.py) shares: its errors, its log
line and atomic writes.

The downloader's modules are uploaded side by side into the node's work dir (the list is
k3deploy.remote.protocol.DOWNLOADER_FILES) and import each other by plain module name, like
protocol.py: fetch_weights.py, the entry, puts its own directory on sys.path first. Standard
library only.
"""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path


class BadInput(Exception):
    pass


class DownloadError(Exception):
    pass


class HubUnavailable(DownloadError):
    """The retry budget ran out on answers that may change (5xx, 429, timeouts): a later run
    may well succeed, so the laptop restarts the downloader (steps/download.py)."""


class Stopped(Exception):
    pass


def log(message: str) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} fetch_weights: {message}", flush=True)


def write_json_atomic(path: Path, doc) -> None:
    # One line: json.dumps with an indent runs the pure-Python encoder, and a file's ranges
    # record rewritten every half second from 32 connections was ~9% of a downloader's GIL time
    # (py-spy --gil, one node on the CDN testbed); without one it is the C encoder.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(doc, separators=(",", ":")))
    os.replace(tmp, path)


def write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)

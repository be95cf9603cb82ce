"""The one place k3deploy makes a pool of threads, on the laptop and on the nodes.

Standard library only, so it ships to the nodes beside the downloader (protocol.DOWNLOADER_FILES)
and is imported there by plain name (`from thread_pool import pool`), while the laptop's fan-out
(core/group.py) imports it from the package. The threads are named, so a stack dump of a hung
downloader (py-spy, faulthandler) says which pool a thread belongs to: hub, peer, hash, group.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor


def pool(workers: int, name: str) -> ThreadPoolExecutor:
    """A pool of at most `workers` threads named `name_N`; use it as a context manager, which
    waits for every submitted call."""
    return ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix=name)

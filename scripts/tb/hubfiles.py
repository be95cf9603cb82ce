"""The mock Hub's files in HUBDIR (see hub.py): JSON read and atomic write, and the per-node
counters it publishes as stats.json (node names from nodes.json)."""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from tb import hubrepo

STATS_INTERVAL = 0.25


def write_json_atomic(path: Path, doc) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True))
    os.replace(tmp, path)


def read_json(path: Path, default):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return default


class Counters:
    """Requests and body bytes per node, for one listener (the Hub's or the CDN's)."""

    def __init__(self, stats: HubStats):
        self.stats, self.by_node = stats, {}
        self.connections = self.slow_connections = 0

    def _node(self, ip: str) -> dict:
        name = self.stats.node_name(ip)
        return self.by_node.setdefault(name, {"bytes": 0, "requests": 0, "authorized_requests": 0, "files": {}})

    def request(self, ip: str, has_bearer: bool) -> None:
        with self.stats.lock:
            node = self._node(ip)
            node["requests"] += 1
            node["authorized_requests"] += int(has_bearer)
            self.stats.dirty = True

    def connection(self, slow: bool) -> None:
        with self.stats.lock:
            self.connections += 1
            self.slow_connections += int(slow)
            self.stats.dirty = True

    def file_bytes(self, ip: str, path: str, sent: int, new_get: bool = False) -> None:
        with self.stats.lock:
            node = self._node(ip)
            entry = node["files"].setdefault(path, {"bytes": 0, "gets": 0})
            entry["bytes"] += sent
            entry["gets"] += int(new_get)
            node["bytes"] += sent
            self.stats.dirty = True

    def totals(self) -> dict:
        """The CDN's section of stats.json (call with the lock held)."""
        nodes = self.by_node.values()
        return {"bytes": sum(n["bytes"] for n in nodes), "requests": sum(n["requests"] for n in nodes),
                "authorized_requests": sum(n["authorized_requests"] for n in nodes),
                "connections": self.connections, "slow_connections": self.slow_connections,
                "by_node": self.by_node}


class HubStats:
    """Per-node counters of the Hub and of its CDN, flushed to stats.json at most every 0.25 s
    and when a file body ends."""

    def __init__(self, hub_dir: Path, repo: hubrepo.Repo):
        self.path, self.nodes_path, self.repo = hub_dir / "stats.json", hub_dir / "nodes.json", repo
        self.lock, self.write_lock = threading.Lock(), threading.Lock()
        self.nodes, self.nodes_stamp = {}, None
        self.hub, self.cdn = Counters(self), Counters(self)
        self.by_node = self.hub.by_node
        self.dirty = True
        self.stop_event = threading.Event()
        threading.Thread(target=self._flush_loop, name="hub-stats", daemon=True).start()

    def node_name(self, ip: str) -> str:
        try:
            st = self.nodes_path.stat()
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError:
            stamp = None
        if stamp != self.nodes_stamp:
            self.nodes, self.nodes_stamp = read_json(self.nodes_path, {}), stamp
        return self.nodes.get(ip, ip)

    def request(self, ip: str, has_bearer: bool) -> None:
        self.hub.request(ip, has_bearer)

    def file_bytes(self, ip: str, path: str, sent: int, new_get: bool = False) -> None:
        self.hub.file_bytes(ip, path, sent, new_get)

    def flush(self) -> str:
        """Write stats.json now; returns its text. Compact JSON: with 32 nodes x 103 files it is
        rewritten thousands of times per run."""
        with self.write_lock:
            with self.lock:
                self.dirty = False
                text = json.dumps({"repo": self.repo.repo_id, "sha": self.repo.sha,
                                   "repo_bytes": self.repo.total_bytes, "by_node": self.by_node,
                                   "cdn": self.cdn.totals(), "updated": time.time()})
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(text)
            os.replace(tmp, self.path)
            return text

    def _flush_loop(self) -> None:
        while not self.stop_event.wait(STATS_INTERVAL):
            if self.dirty:
                self.flush()

"""A simulated node for k3deploy/remote/fetch_weights.py against the in-process mock Hub: its
paths, the downloader run as a subprocess (as on a node, so SIGKILL and fresh imports are real),
and what the Hub served it. Shared by the test_fetch_weights*.py modules."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from polling import wait_until

from k3deploy.remote import protocol

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "k3deploy" / "remote" / "fetch_weights.py"
STORAGE = "hub/models--moonshotai--Kimi-K3"


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(extra)
    return env


def write_manifest(path: Path, hub, max_workers=4) -> Path:
    files = [{"path": f.path, "size": f.size, "sha256": f.sha256, "oid": None if f.is_lfs else f.git_oid}
             for f in hub.repo.files]
    doc = protocol.with_schema({"repo": hub.repo.repo_id, "revision": "main", "sha": hub.repo.sha,
                                "endpoint": hub.url, "max_workers": max_workers, "files": files})
    path.write_text(json.dumps(doc))
    return path


class Node:
    """One simulated node's paths: HF_HOME, manifest, progress, log."""

    def __init__(self, root: Path, hub, max_workers=4):
        self.root, self.hub = root, hub
        root.mkdir(parents=True, exist_ok=True)
        self.hf_home, self.progress = root / "hf", root / "progress.json"
        self.manifest = write_manifest(root / "manifest.json", hub, max_workers)
        self.storage = self.hf_home / STORAGE

    def argv(self, env_file: Path | None = None) -> list[str]:
        argv = [sys.executable, str(SCRIPT), "--manifest", str(self.manifest), "--hf-home", str(self.hf_home),
                "--progress", str(self.progress)]
        return argv + (["--env-file", str(env_file)] if env_file else [])

    def run(self, env_file: Path | None = None, **env) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(env_file), env=clean_env(**env), capture_output=True, text=True,
                              timeout=120)

    def start(self) -> subprocess.Popen:
        return subprocess.Popen(self.argv(), env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def read_progress(self) -> dict:
        return json.loads(self.progress.read_text())

    def blob(self, f) -> Path:
        return self.storage / "blobs" / f.etag

    def partial(self, f) -> Path:
        return Path(protocol.partial_path(str(self.storage), f.etag))

    def kept(self, f) -> int:
        """Bytes of f the downloader's resume record names (what a rerun does not fetch again)."""
        done = self.ranges(f)
        if done is None:
            return self.partial(f).stat().st_size if self.partial(f).exists() else 0
        return sum(end - start for start, end in done)

    def ranges(self, f) -> list | None:
        """The finished [start, end) ranges of f's resume record, None without a record."""
        try:
            doc = json.loads(Path(protocol.ranges_path(str(self.storage), f.etag)).read_text())
        except FileNotFoundError:
            return None
        return doc["done"]

    def on_disk(self, f) -> int:
        return protocol.partial_bytes(str(self.partial(f))) if self.partial(f).exists() else 0

    def status(self) -> dict:
        """What the laptop's look reads on the node: remote/weights_status.py's document."""
        program = Path(protocol.__file__).with_name("weights_status.py")
        out = subprocess.run([sys.executable, str(program), str(self.hf_home), str(self.progress),
                              str(self.root / "download.pid")], input=self.manifest.read_text(),
                             capture_output=True, text=True, timeout=30, check=True,
                             env=clean_env(PYTHONPATH=str(program.parent)))
        return json.loads(out.stdout)

    def leftovers(self) -> list[str]:
        return sorted(p.name for p in (self.storage / "blobs").iterdir()
                      if p.name.endswith((".incomplete", ".k3deploy-partial", ".ranges.json")))


def served(hub) -> dict:
    return hub.stats()["by_node"].get("127.0.0.1", {"files": {}, "requests": 0, "authorized_requests": 0})


def hub_done(hub) -> None:
    """Wait until the hub has ended every connection of a killed or stopped downloader: only
    then does `served` count all the bytes it sent to it."""
    wait_until(lambda: hub.answering() == 0, 10, "the hub to end the dead client's connections")


def gets_and_bytes(stats: dict, path: str) -> tuple[int, int]:
    entry = stats["files"].get(path, {"gets": 0, "bytes": 0})
    return entry["gets"], entry["bytes"]


def python_with_hf(code: str, hf_home: Path, **env) -> subprocess.CompletedProcess:
    """Run code in a fresh interpreter (huggingface_hub reads HF_HOME/HF_HUB_OFFLINE at import)."""
    return subprocess.run([sys.executable, "-c", code], env=clean_env(HF_HOME=str(hf_home), **env),
                          capture_output=True, text=True, timeout=60)

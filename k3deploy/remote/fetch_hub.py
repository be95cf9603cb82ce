"""Ranged, resumable fetches: the partial blob on disk with a running hash (the Hub and the
peers, peer_fetch.py, append to the same one), and the Hub source: ranged GETs through
huggingface_hub's own HTTP client with bounded retries."""
from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

from fetch_base import DownloadError, Stopped, log
from fetch_manifest import FileSpec, Manifest
from fetch_progress import Progress

RETRIES_WITHOUT_PROGRESS = 8  # consecutive failed requests that brought no new byte
BACKOFF_CAP_SECONDS = 30.0


class PartialBlob:
    """blobs/<etag>.incomplete with a running hash of everything in it."""

    def __init__(self, path: Path, spec: FileSpec, progress: Progress):
        self.path, self.spec, self.progress = path, spec, progress
        self.hasher, self.have, self.sources = spec.new_hasher(), 0, set()
        if path.exists() and path.stat().st_size > spec.size:
            log(f"{spec.path}: partial file is larger than the file; starting over")
            path.unlink()
        with open(path, "ab+") as f:  # hash what an earlier run left, so resuming needs no refetch
            f.seek(0)
            while chunk := f.read(8 << 20):
                self.hasher.update(chunk)
                self.have += len(chunk)
        self.resumed_from = self.have
        progress.partial(spec, self.have)

    def append(self, f, data: bytes, source: str = "hub") -> None:
        f.write(data)
        self.hasher.update(data)
        self.have += len(data)
        self.sources.add(source)
        self.progress.received_bytes(self.spec, len(data), source)

    def restart(self, f) -> None:
        f.seek(0)
        f.truncate()
        self.hasher, self.have, self.resumed_from = self.spec.new_hasher(), 0, 0
        self.progress.partial(self.spec, 0)


class Fetcher:
    """Ranged GETs through huggingface_hub's HTTP client, with bounded retries."""

    def __init__(self, manifest: Manifest, token: str | None, stop_event: threading.Event):
        from huggingface_hub import constants, hf_hub_url
        from huggingface_hub.utils import build_hf_headers, get_session
        self.manifest, self.stop_event, self.url_for = manifest, stop_event, hf_hub_url
        self.session, self.timeout = get_session(), constants.HF_HUB_DOWNLOAD_TIMEOUT
        self.headers = build_hf_headers(token=token, library_name="k3deploy-fetch-weights", library_version="1")
        self.headers["Accept-Encoding"] = "identity"  # byte offsets must be offsets in the file itself
        http_module = sys.modules.get(type(self.session).__module__.split(".")[0])
        self.transport_errors = (getattr(http_module, "TransportError", OSError),)

    def fetch(self, spec: FileSpec, part: PartialBlob) -> None:
        url = self.url_for(self.manifest.repo, spec.path, revision=self.manifest.sha, endpoint=self.manifest.endpoint)
        failures = 0
        with open(part.path, "ab") as f:
            while part.have < spec.size:
                before = part.have
                try:
                    self._request(url, spec, part, f)
                except self.transport_errors as e:
                    reason = f"{type(e).__name__}: {e}"
                except RetryableStatus as e:
                    reason = str(e)
                else:
                    reason = "the response ended early"
                if part.have >= spec.size:
                    break
                failures = 0 if part.have > before else failures + 1
                if failures >= RETRIES_WITHOUT_PROGRESS:
                    raise DownloadError(f"{spec.path}: gave up after {failures} attempts without progress ({reason})")
                delay = min(BACKOFF_CAP_SECONDS, 0.25 * 2 ** max(failures - 1, 0))
                log(f"{spec.path}: {reason}; resuming at byte {part.have} in {delay:.2f}s")
                if self.stop_event.wait(delay):
                    raise Stopped()
            f.flush()
            os.fsync(f.fileno())

    def _request(self, url: str, spec: FileSpec, part: PartialBlob, f) -> None:
        headers = dict(self.headers)
        if part.have:
            headers["Range"] = f"bytes={part.have}-"
        with self.session.stream("GET", url, headers=headers, timeout=self.timeout) as response:
            self._check_status(response, spec, part)
            if part.have and response.status_code == 200:
                log(f"{spec.path}: server ignored the range request; starting the file over")
                part.restart(f)
            for chunk in response.iter_bytes():
                if self.stop_event.is_set():
                    raise Stopped()
                if part.have + len(chunk) > spec.size:
                    part.restart(f)
                    raise DownloadError(f"{spec.path}: server sent more than the expected {spec.size} bytes")
                part.append(f, chunk)

    def _check_status(self, response, spec: FileSpec, part: PartialBlob) -> None:
        status = response.status_code
        if status in (200, 206):
            content_range = response.headers.get("Content-Range", "")
            if status == 206 and not content_range.startswith(f"bytes {part.have}-"):
                raise RetryableStatus(f"unexpected Content-Range {content_range!r}")
            total = content_range.rpartition("/")[2] if status == 206 else response.headers.get("Content-Length")
            if response.headers.get("Content-Encoding", "identity") != "identity":
                total = None  # a compressed length says nothing about the file's size
            if total and total.isdigit() and int(total) != spec.size:
                raise DownloadError(f"{spec.path}: the server has {total} bytes, the manifest says {spec.size}")
            return
        response.read()
        if status in (408, 429) or status >= 500:
            raise RetryableStatus(f"HTTP {status}")
        from huggingface_hub.utils import hf_raise_for_status
        try:
            hf_raise_for_status(response)
        except Exception as e:
            reason = response.headers.get("X-Error-Message") or (str(e).strip().splitlines() or [""])[0]
            raise DownloadError(f"{spec.path}: HTTP {status} {type(e).__name__}: {reason}") from None
        raise DownloadError(f"{spec.path}: unexpected HTTP {status}")


class RetryableStatus(Exception):
    pass

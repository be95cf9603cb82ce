"""The weight load's reads and host work, as a real rank does them: the shard files read
from disk at a disk's pace and the CPU busy copying what was read, so the kernel's counters
(/proc/<pid>/stat utime+stime, /proc/<pid>/io rchar and read_bytes) move through the whole load
as a real rank's do, while its log says nothing and its GPU memory stands still.

Upstream: SGLang's multi-thread loader opens each shard with
`safetensors.safe_open(st_file, framework="pt", device="cpu")` (mmap) and reads every tensor
with `get_tensor`, or with `disable_mmap` reads the file whole, `f.read()`
(python/sglang/srt/model_loader/weight_utils.py multi_thread_safetensors_weights_iterator,
0.5.16); the loader copies each tensor into the parameter already built on the GPU
(srt/model_loader/loader.py DefaultModelLoader.load_weights_and_postprocess). Copying is host
CPU; from a cold page cache (the k3deploy downloader writes with O_DIRECT) every page is a
block read, counted in read_bytes, mapped or not; read() bytes are counted in rchar too (Linux
Documentation/filesystems/proc.rst "/proc/<pid>/io"). The testbed's NVMe is a tmpfs, where no
read reaches a block device, so the stand-in reads as the `disable_mmap` path does: its bytes
show in rchar, as a real rank's show in read_bytes (facts/engine_usage.py takes the larger).
"""
import os
import time
import zlib

CHUNK = 1 << 20       # bytes read at a time
TICK = 0.1            # seconds: how often the pacing looks at the clock
BUSY_SHARE = 0.2      # of each tick spent on host work (conversion, staging copies)
_BLOCK = bytes(64 * 1024)


class PacedLoad:
    """Reads `total_bytes` of shard files spread over `seconds`, busy BUSY_SHARE of the time."""

    def __init__(self, total_bytes, seconds):
        self.total = max(int(total_bytes), 1)
        self.seconds = max(float(seconds), 0.0)
        self.start = time.monotonic()
        self.read_bytes = 0

    def read(self, path):
        """One shard read whole, made cold first (where the page cache can be dropped)."""
        staged = bytearray(CHUNK)
        with open(path, "rb", buffering=0) as f:
            # What a downloader writing with O_DIRECT leaves: nothing of the file cached.
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            while got := f.readinto(staged):
                self.read_bytes += got
                self._work_until(self.start + self.seconds * self.read_bytes / self.total)

    def finish(self):
        """The load's last moments: its full time, then done."""
        self._work_until(self.start + self.seconds)

    def _work_until(self, due):
        while (now := time.monotonic()) < due:
            busy_until = min(due, now + TICK * BUSY_SHARE)
            while time.monotonic() < busy_until:
                zlib.crc32(_BLOCK)
            time.sleep(max(0.0, min(due, now + TICK) - time.monotonic()))

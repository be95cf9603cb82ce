"""scripts/bench --throughput's measuring: a client run's wall time, CPU (its own and a server's)
and peak RSS; and this machine's floor for the same bytes (sha256, writing them)."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

REMOTE = Path(__file__).resolve().parents[1] / "k3deploy" / "remote"
sys.path.insert(0, str(REMOTE))
import direct_io  # noqa: E402  (the downloader's own writer)

TICK = os.sysconf("SC_CLK_TCK")


def _cpu_of(pids: list[int]) -> float:
    """utime + stime of live processes, seconds (/proc/PID/stat fields 14 and 15)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / TICK


def children(pid: int) -> list[int]:
    out = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            out += [int(p) for p in (task / "children").read_text().split()]
    except OSError:  # it ended meanwhile
        pass
    return out


def _tree_rss(pid: int) -> int:
    """kB resident in a process and all its descendants now (VmRSS of each)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
        except OSError:
            continue
        total += next((int(ln.split()[1]) for ln in status.splitlines() if ln.startswith("VmRSS:")), 0)
        todo += children(p)
    return total


class RssPeak(threading.Thread):
    """The largest sum of RSS over a process tree, sampled every 20 ms (wait4's ru_maxrss
    would count the bench's own image, which the child has until it execs)."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peak_kb, self.done = pid, 0, threading.Event()
        self.start()

    def run(self):
        while not self.done.wait(0.02):
            self.peak_kb = max(self.peak_kb, _tree_rss(self.pid))


class Measured:
    """One client run: wall seconds, its CPU and peak RSS (wait4: the child and its reaped
    descendants), and the server's CPU over the same span."""

    def __init__(self, argv: list[str], server_pids: list[int], env: dict | None = None, shell=False):
        cpu0, began = _cpu_of(server_pids), time.monotonic()
        proc = subprocess.Popen(argv, env=env, shell=shell, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        rss = RssPeak(proc.pid)
        err = proc.stderr.read()
        rss.done.set()
        rss.join()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        self.seconds = time.monotonic() - began
        self.server_cpu = _cpu_of(server_pids) - cpu0
        self.cpu, self.rss_mb = usage.ru_utime + usage.ru_stime, rss.peak_kb / 1024
        if proc.returncode != 0:
            sys.exit(f"{argv if not shell else argv[:200]} exited {proc.returncode}:\n{err.decode()[-2000:]}")

    def figures(self, nbytes: int) -> dict:
        gb = nbytes / 1e9
        return {"MBps": round(nbytes / self.seconds / 1e6), "seconds": round(self.seconds, 2),
                "cpu_s_per_GB": round(self.cpu / gb, 2), "server_cpu_s_per_GB": round(self.server_cpu / gb, 2),
                "peak_rss_MB": round(self.rss_mb),
                # cores the client and the server kept busy on average: what a second worker
                # process has left to use on this machine
                "cores_busy": round(self.cpu / self.seconds, 2),
                "server_cores_busy": round(self.server_cpu / self.seconds, 2)}


def floor(tmp: Path, repo) -> dict:
    """sha256 of the shards, then writing them: plain pwrite (through the page cache), and
    through direct_io as the downloader writes (past it where --dir's file system allows)."""
    paths = [repo.root / f.path for f in repo.files if f.sha256]
    gb = sum(p.stat().st_size for p in paths) / 1e9
    began, cpu0 = time.monotonic(), time.process_time()
    buf = bytearray(8 << 20)
    for p in paths:
        h = hashlib.sha256()
        with open(p, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                h.update(memoryview(buf)[:n])
    hashed, hash_cpu = time.monotonic() - began, time.process_time() - cpu0
    wrote, write_cpu, _ = _write_pass(tmp, paths, direct=False)
    direct_s, direct_cpu, direct = _write_pass(tmp, paths, direct=True)
    return {"path": "floor", "fs": direct_io.fs_type(os.stat(tmp).st_dev),
            "sha256_MBps": round(gb * 1e3 / hashed), "sha256_cpu_s_per_GB": round(hash_cpu / gb, 2),
            "write_MBps": round(gb * 1e3 / wrote), "write_cpu_s_per_GB": round(write_cpu / gb, 2),
            "direct_io": direct, "write_direct_io_MBps": round(gb * 1e3 / direct_s),
            "write_direct_io_cpu_s_per_GB": round(direct_cpu / gb, 2)}


def _write_pass(tmp: Path, paths: list[Path], direct: bool) -> tuple[float, float, bool]:
    """Seconds and CPU-seconds to copy `paths` into new files under `tmp` in 8 MiB pieces, and
    whether direct_io went past the page cache."""
    began, cpu0, went_direct = time.monotonic(), time.process_time(), False
    buf = direct_io.aligned(8 << 20)   # what a connection reads into: written from as is
    for i, p in enumerate(paths):
        dst = tmp / f"copy{i}"
        dst.write_bytes(b"")
        disk = direct_io.DiskFile(dst) if direct else None
        with open(p, "rb", buffering=0) as f, open(dst, "r+b") as out:
            at = 0
            while n := f.readinto(buf[:8 << 20]):
                if disk is not None:
                    disk.write(out.fileno(), buf[:n], at)
                else:
                    direct_io.pwrite_all(out.fileno(), buf[:n], at)
                at += n
            os.fsync(out.fileno())
        if disk is not None:
            went_direct = disk.direct
            disk.close()
        dst.unlink()
    return time.monotonic() - began, time.process_time() - cpu0, went_direct

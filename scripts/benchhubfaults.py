"""scripts/bench --hub-faults [outage ratelimit forbid kill]: issue 19's fault behaviour on a
testbed (one node, the mock Hub with its CDN, `testbed fault` for the faults). Prints figures,
asserts nothing; each scenario says whether its target held ("held": true/false).

  outage     `hub-outage 300` (503 from the Hub and the CDN) in the middle of a full `k3deploy up`
             with the default download.retry_minutes: the same `up` exits 0.
  ratelimit  `hub-rate-limit QUOTA WINDOW` during a download: from the mock Hub's request log
             (HUBDIR/requests.jsonl, hublog.py), no /resolve of the node arrives between a 429
             that said `t` and `t` seconds later (apart from requests already under way when
             the 429 went out: those arrive within IN_FLIGHT of it).
  forbid     `cdn-forbid 3` mid-download: no file fails, the CDN saw no Authorization header.
  probe      `hub-outage SECONDS` (90) during `run resume-download`: from the request log, how
             many requests each backoff round sent to the Hub and to the CDN while the outage
             lasted (one probe per host per round is the target; the first round, the requests
             already under way when the outage began, is left out of the target).
  kill       the node's downloader SIGKILLed mid-way through the 96 files, then the download run
             again: bytes the Hub and CDN served the second run beyond what was missing at the
             kill, against the bytes on disk at the kill (complete blobs plus the resume records;
             also against the partials' allocated blocks: written, whether recorded or not).
"""
from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
from tb import hublog  # noqa: E402
from tb.sshcmd import ssh_argv  # noqa: E402

PY = sys.executable
SCENARIOS = ("outage", "ratelimit", "forbid", "kill", "probe")
IN_FLIGHT = 0.5  # s: a request sent before the client read the 429 arrives within this of it
# What is on the node's disk: complete blobs, and each partial's resume record (bytes kept).
_DISK = r"""
import glob, json, os
done = kept = written = 0
for path in glob.glob('/mnt/nvme/hf/hub/models--*/blobs/*'):
    if path.endswith('.ranges.json'):
        kept += sum(e - s for s, e in json.load(open(path))['done'])
    elif path.endswith('.k3deploy-partial'):
        st = os.stat(path)
        written += min(st.st_size, st.st_blocks * 512)
    elif not path.endswith(('.incomplete', '.lock')):
        done += os.path.getsize(path)
print(json.dumps({'complete': done, 'recorded': kept, 'allocated': written}))
"""


def _sh(*argv, check=True, timeout=1800):
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, check=False, timeout=timeout)
    if check and proc.returncode != 0:
        sys.exit(f"{' '.join(map(str, argv))} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return proc


class Bed:
    """One testbed node and the files of the testbed around it."""

    def __init__(self, tb: Path):
        doc = json.loads((tb / "testbed.json").read_text())["nodes"]
        self.dir, self.inventory = tb, tb / "inventory.yaml"
        self.address = next(iter(doc.values()))["address"]

    def ssh(self, command: str) -> subprocess.CompletedProcess:
        return _sh(*ssh_argv(self.dir, "root", self.address, command), check=False, timeout=120)

    def fault(self, *args) -> None:
        _sh(PY, "scripts/testbed", "fault", "--dir", str(self.dir), *map(str, args))

    def stats(self) -> dict:
        return json.loads(_sh(PY, "scripts/testbed", "stats", "--dir", str(self.dir), "--json").stdout)

    def served(self) -> int:
        """Body bytes the Hub and its CDN sent this node."""
        stats = self.stats()
        return sum(s.get("by_node", {}).get("node0", {}).get("bytes", 0) for s in (stats["hub"], stats["cdn"]))

    def k3(self, *args) -> subprocess.Popen:
        return subprocess.Popen([PY, "-m", "k3deploy", *args, "-i", str(self.inventory)], cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def log_count(self, words: str) -> int:
        out = self.ssh(f"grep -c {words!r} /mnt/nvme/.k3deploy/download.log").stdout.strip()
        return int(out or 0)

    def requests(self) -> list[dict]:
        path = self.dir / "hub" / "requests.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@contextmanager
def bed(*flags):
    with tempfile.TemporaryDirectory(prefix="k3bench-faults-") as tmp:
        tb = Path(tmp) / "tb"
        try:
            _sh(PY, "scripts/testbed", "up", "--dir", str(tb), "--nodes", "1", "--disk", "2G", "--hub-cdn",
                "--hub-rate", "0", *map(str, flags), timeout=300)
            yield Bed(tb)
        finally:
            _sh(PY, "scripts/testbed", "down", "--dir", str(tb), check=False, timeout=300)


def _wait(predicate, seconds: float, what: str, run: subprocess.Popen) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if run.poll() is not None:
            raise RuntimeError(f"k3deploy ended (rc {run.returncode}) before {what}:\n{run.stdout.read()[-1500:]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {seconds:g}s: {what}")
        time.sleep(0.5)


def _finish(proc: subprocess.Popen, timeout: float) -> tuple[int, str]:
    try:
        out = proc.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        out = proc.communicate()[0]
    return proc.returncode, out


def _fault_mid_download(tb: Bed, timeout: float, *fault) -> tuple[int, str, float]:
    """`run resume-download` with the fault set once 10 MB came from the CDN: its rc, its
    output and when (time.time()) the fault was set."""
    run = tb.k3("run", "resume-download")
    _wait(lambda: tb.stats()["cdn"]["bytes"] > 10_000_000, 300, "10 MB from the CDN", run)
    tb.fault(*fault)
    set_at = time.time()
    return (*_finish(run, timeout), set_at)


def outage(seconds: float = 300, link: int = 2_000_000) -> dict:
    """A full `up` (b300, one node) with an outage of `seconds` from 15 MB into the download."""
    with bed("--gpu", "b300", "--shard-bytes", 2_000_000, "--hub-node-rate", link) as tb:
        began = time.monotonic()
        run = tb.k3("up")
        _wait(lambda: tb.stats()["cdn"]["bytes"] > 15_000_000, 300, "15 MB from the CDN", run)
        tb.fault("hub-outage", seconds)
        at = time.monotonic()
        before = tb.stats()
        rc, out = _finish(run, seconds + 1500)
        stats = tb.stats()
        starts = tb.log_count("ranged HTTP via huggingface_hub")
    return {"scenario": "outage", "outage_s": seconds, "retry_minutes": "default (15)", "up_rc": rc,
            "up_s": round(time.monotonic() - began, 1), "after_outage_began_s": round(time.monotonic() - at, 1),
            "downloader_starts": starts, "cdn_bytes_at_outage": before["cdn"]["bytes"],
            "repo_bytes": stats["hub"]["repo_bytes"], "cdn_bytes": stats["cdn"]["bytes"],
            "cdn_authorized_requests": stats["cdn"]["authorized_requests"],
            "held": rc == 0 and time.monotonic() - at >= seconds,
            "tail": None if rc == 0 else out[-1500:]}


def ratelimit(quota: int = 30, window: int = 20) -> dict:
    with bed("--shard-bytes", 300_000, "--hub-node-rate", 4_000_000) as tb:
        tb.fault("hub-rate-limit", quota, window)
        began = time.monotonic()
        rc, out = _finish(tb.k3("run", "resume-download"), 900)
        took = time.monotonic() - began
        log = tb.requests()
        kept = Path(tempfile.gettempdir()) / "k3bench-hub-faults-ratelimit-requests.jsonl"
        kept.write_text((tb.dir / "hub" / "requests.jsonl").read_text())
    seen = hublog.after_429(log, "node0", "hub", IN_FLIGHT)
    resolves = [r for r in log if r["host"] == "hub" and "/resolve/" in r["path"]]
    return {"scenario": "ratelimit", "quota": quota, "window_s": window, "rc": rc, "seconds": round(took, 1),
            "resolve_requests": len(resolves), **seen, "request_log": str(kept),
            "held": rc == 0 and seen["answered_429"] > 0 and not seen["early"],
            "tail": None if rc == 0 else out[-1500:]}


def forbid(count: int = 3) -> dict:
    with bed("--shard-bytes", 2_000_000, "--hub-node-rate", 4_000_000) as tb:
        rc, out, _ = _fault_mid_download(tb, 900, "cdn-forbid", count)
        cdn = tb.stats()["cdn"]
        refused = [r for r in tb.requests() if r["host"] == "cdn" and r["status"] == 403]
        starts = tb.log_count("ranged HTTP via huggingface_hub")  # a failed file ends the downloader
    return {"scenario": "forbid", "count": count, "rc": rc, "cdn_403s": len(refused), "downloader_starts": starts,
            "cdn_requests": cdn["requests"], "cdn_authorized_requests": cdn["authorized_requests"],
            "held": rc == 0 and starts == 1 and len(refused) == count and cdn["authorized_requests"] == 0,
            "tail": None if rc == 0 else out[-1500:]}


def probe(seconds: float = 90) -> dict:
    with bed("--shard-bytes", 2_000_000, "--hub-node-rate", 2_000_000) as tb:
        rc, out, began = _fault_mid_download(tb, seconds + 900, "hub-outage", seconds)
        log = tb.requests()
        kept = Path(tempfile.gettempdir()) / "k3bench-hub-faults-probe-requests.jsonl"
        kept.write_text((tb.dir / "hub" / "requests.jsonl").read_text())
    # The outage as the Hub saw it: from its first 503 to its last one.
    failed = [r["arrived"] for r in log if r["status"] == 503 and r["arrived"] >= began - 1]
    since, until = (min(failed), max(failed) + 0.001) if failed else (began, began + seconds)
    hosts = {host: hublog.rounds(log, "node0", host, since, until) for host in ("hub", "cdn")}
    later = [n for h in hosts.values() for n in h["per_round"][1:]]
    return {"scenario": "probe", "outage_s": seconds, "rc": rc, "request_log": str(kept), **hosts,
            "held": rc == 0 and bool(later) and max(later) <= 2,
            "tail": None if rc == 0 else out[-1500:]}


def kill(fraction: float = 0.5) -> dict:
    with bed("--shard-bytes", 2_000_000, "--hub-node-rate", 4_000_000) as tb:
        repo = tb.stats()["hub"]["repo_bytes"]
        run = tb.k3("run", "resume-download")
        _wait(lambda: tb.served() > fraction * repo, 300, f"{fraction:.0%} of the repo served", run)
        run.kill()  # the laptop first: it must not start the downloader again
        run.wait()
        tb.ssh("pkill -9 -f fetch_weights.py")
        time.sleep(1.0)  # the hub counts what it wrote into the dead connections
        served_at_kill = tb.served()
        disk = json.loads(tb.ssh(f"python3 -c {shlex.quote(_DISK)}").stdout)
        rc, out = _finish(tb.k3("run", "resume-download"), 900)
        again = tb.served() - served_at_kill
        # what the rerun said of the files it did not simply resume
        said = tb.ssh("grep -E 'mismatch|starting over|fails verification|adopting|resuming with' "
                      "/mnt/nvme/.k3deploy/download.log").stdout.splitlines()
    on_disk = disk["complete"] + disk["recorded"]
    refetched = again - (repo - on_disk)
    # The partials' allocated blocks (tmpfs pages): what was written, recorded or not yet.
    written = disk["complete"] + disk["allocated"]
    return {"scenario": "kill", "rc": rc, "repo_bytes": repo, "served_at_kill": served_at_kill,
            "on_disk_at_kill": on_disk, "of_which_partial_ranges": disk["recorded"],
            "lost_in_flight_at_kill": served_at_kill - on_disk, "served_after": again,
            "fetched_again": refetched, "fetched_again_over_on_disk": round(refetched / max(on_disk, 1), 4),
            "partial_blocks_at_kill": disk["allocated"], "resumed_files": sum("resuming with" in x for x in said),
            "not_resumed": [x for x in said if "resuming with" not in x][:6], "written_at_kill": written,
            "fetched_again_of_written": again - (repo - written),
            "held": rc == 0 and max(refetched, again - (repo - written)) <= 0.05 * on_disk,
            "tail": None if rc == 0 else out[-1500:]}


def main(names: list[str]) -> int:
    for name in names or SCENARIOS:
        print(json.dumps(globals()[name]()), flush=True)
    return 0

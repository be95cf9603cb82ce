"""Paths, node facts, the calls log and small process helpers shared by every stand-in.

The node runtime dir (env K3TB_RUN, default /run/k3tb) is the contract with the testbed:
node.json describes the simulated machine, calls.jsonl records every stand-in invocation.

Every tool call is a new process, several per node per fact batch: modules here and in the
read-only commands (inspect, info, logs, ps, nvidia-smi) import only what they use on every
call; datetime, hashlib (OpenSSL), uuid, subprocess and friends stay out of those paths.
"""
import contextlib
import fcntl
import json
import math
import os
import time

STANDINS_DIR = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
PYTHON = "/usr/bin/python3"

DEFAULT_NODE = {
    "name": "node", "gpu": "h100", "gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 8,
    "gpu_mem_mib": 81559, "cuda": "13.0", "driver": "580.65.06",
    "engine_load_seconds": 2.0, "pull_seconds": 0.5, "nvidia_toolkit": True,
}


def run_dir():
    return os.environ.get("K3TB_RUN", "/run/k3tb")


def etc_docker():
    return os.environ.get("K3TB_ETC_DOCKER", "/etc/docker")


def etc_containerd():
    return os.environ.get("K3TB_ETC_CONTAINERD", "/etc/containerd")


def host_path(node_path):
    """Where an absolute in-node path lives on disk: K3TB_ROOTFS (tests only) prefixes it."""
    rootfs = os.environ.get("K3TB_ROOTFS", "")
    return os.path.join(rootfs, node_path.lstrip("/")) if rootfs else node_path


def engine_entry():
    return os.environ.get("K3TB_ENGINE_ENTRY") or os.path.join(STANDINS_DIR, "engine", "entry.py")


def node_config():
    """node.json merged over defaults; a missing file means a default H100 node."""
    config = dict(DEFAULT_NODE)
    config.update(read_json(os.path.join(run_dir(), "node.json"), {}))
    return config


def read_json(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (FileNotFoundError, NotADirectoryError):
        return default


def write_json_atomic(path, data, mode=0o644):
    tmp = f"{path}.tmp.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
    os.chmod(tmp, mode)  # umask must not widen or narrow what the caller asked for
    os.replace(tmp, path)


@contextlib.contextmanager
def locked(path):
    """Exclusive advisory lock on `path` (created if needed), released on exit."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def log_call(tool, argv):
    """Append one line to calls.jsonl; concurrent callers are serialised with flock."""
    line = json.dumps({"tool": tool, "argv": [tool] + list(argv), "t": time.time()}) + "\n"
    path = os.path.join(run_dir(), "calls.jsonl")
    try:
        os.makedirs(run_dir(), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    except OSError:
        return  # an unprivileged user on a dir the testbed did not open up: never break the tool
    try:
        if os.fstat(fd).st_uid == os.geteuid():
            os.fchmod(fd, 0o666)  # non-root logins (no sudo) append to the same log
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def proc_start_time(pid):
    """Kernel start time of `pid` (clock ticks since boot), or None if it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def process_alive(pid, start_time=None):
    """True if `pid` runs and, when given, is the same process (guards against pid reuse)."""
    if not pid:
        return False
    started = proc_start_time(pid)
    return started is not None and (start_time is None or started == start_time)


def rfc3339(t):
    """datetime.fromtimestamp(t, utc) as docker prints it, without importing datetime:
    microseconds rounded half-even and carried into the seconds, as datetime does. Docker
    prints time.Time in Go's RFC3339Nano, which trims trailing zeros of the fraction (and the
    dot with them); the zero time is Go's "0001-01-01T00:00:00Z" (Go src/time/format.go)."""
    if not t:
        return "0001-01-01T00:00:00Z"
    frac, whole = math.modf(t)
    micro = round(frac * 1e6)
    if micro >= 1000000:
        micro, whole = micro - 1000000, whole + 1
    elif micro < 0:
        micro, whole = micro + 1000000, whole - 1
    frac_text = f".{micro:06d}".rstrip("0").rstrip(".")
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + frac_text + "Z"


def digest(algorithm, data):
    """hashlib.new(algorithm, data) from the interpreter's builtin module (_sha1, _sha256): the
    same digest, without hashlib loading OpenSSL (~4 ms on every call of a read-only tool)."""
    try:
        return getattr(__import__("_" + algorithm), algorithm)(data)
    except ImportError:  # an interpreter without it (3.12 renamed _sha256 to _sha2)
        import hashlib
        return hashlib.new(algorithm, data)


def human_duration(seconds):
    """Docker's go-units HumanDuration, used by `ps` and `images`."""
    s = int(seconds)
    if s < 1:
        return "Less than a second"
    if s == 1:
        return "1 second"
    if s < 60:
        return f"{s} seconds"
    minutes = s // 60
    if minutes == 1:
        return "About a minute"
    if minutes < 60:
        return f"{minutes} minutes"
    hours = int(seconds / 3600 + 0.5)
    if hours == 1:
        return "About an hour"
    if hours < 48:
        return f"{hours} hours"
    if hours < 24 * 14:
        return f"{hours // 24} days"
    if hours < 24 * 60:
        return f"{hours // 24 // 7} weeks"
    if hours < 24 * 730:
        return f"{hours // 24 // 30} months"
    return f"{int(seconds / 3600) // 24 // 365} years"


def human_size(size):
    """go-units HumanSizeWithPrecision(size, 3): decimal units as `docker images` prints them."""
    units = ["B", "kB", "MB", "GB", "TB", "PB"]
    i = 0
    while size >= 1000 and i < len(units) - 1:
        size /= 1000.0
        i += 1
    return f"{size:.3g}{units[i]}"

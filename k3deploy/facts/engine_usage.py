"""What the engine container's processes have done so far, as the kernel counts it: CPU time
and bytes read, summed over the container's main process and all its descendants.

A weight load shows on a rank in nothing else: SGLang builds the model on the GPU before it
opens a shard (srt/model_loader/loader.py@0.5.16 line 789, `with target_device:`), so the GPU
memory in use stands still through the load; its bar reaches `docker logs` only when it
closes, and the other ranks print nothing. The reads and the copies into the GPU do show: as
CPU time (faulting a shard's mapped pages in and copying them out) and, from a cold page
cache, as block reads.

The container's processes: `docker inspect -f '{{.State.Pid}}'` is its main process's PID in
the daemon's PID namespace (moby api/swagger.yaml ContainerState.Pid, "The process ID of
this container"; 0 unless it runs: container/state.go SetStopped); the schedulers are its
descendants (SGLang spawns one process per GPU); a `docker exec`'d process is not (its parent
is the runtime's shim). The tree, not the container's cgroup, because the cgroup's path and
files differ by cgroup version and docker's cgroup driver, the tree does not. PPIDs come from
every process's /proc/PID/stat, then each one's stat and io are printed as the kernel writes
them (Linux Documentation/filesystems/proc.rst, Table 1-4 "Contents of the stat fields": utime
and stime, fields 14 and 15, in clock ticks of `getconf CLK_TCK`, starttime field 22; section
"/proc/<pid>/io": rchar counts every read() byte, page cache hits included, read_bytes the
bytes the process caused to be fetched from storage, page faults of a mapping included).
/proc/PID/io needs ptrace access to the process (root for a container's), hence sudo.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from k3deploy.facts import Probe

# Every process's PPID from its stat (the command name in parentheses may hold spaces and
# parentheses: the fields after the last ") " are the fixed ones), then the PIDs descending
# from ROOT, ROOT included.
_DESCENDANTS = (
    '{ r = $0; sub(/^.*\\) /, "", r); split(r, f, " "); parent[$1] = f[2] } '
    'END { keep[root] = 1; grew = 1; '
    'while (grew) { grew = 0; for (p in parent) '
    'if (!(p in keep) && (parent[p] in keep)) { keep[p] = 1; grew = 1 } } '
    'for (p in keep) print p }')
_LINE = re.compile(r"^/proc/(\d+)/(stat|io):(.*)$")


@dataclass(frozen=True)
class ProcessUsage:
    pid: int
    start: int            # starttime, clock ticks after boot: a reused PID is another process
    cpu_ticks: int        # utime + stime
    read_bytes: int | None = None   # None: /proc/PID/io was not readable
    rchar: int | None = None

    @property
    def bytes_read(self) -> int:
        """What the process read: from storage (mapped pages included) or through read()."""
        return max(self.read_bytes or 0, self.rchar or 0)


@dataclass(frozen=True)
class EngineUsage:
    clk_tck: int
    processes: tuple[ProcessUsage, ...]

    @property
    def cpu_seconds(self) -> float:
        return sum(p.cpu_ticks for p in self.processes) / self.clk_tck

    @property
    def bytes_read(self) -> int:
        return sum(p.bytes_read for p in self.processes)

    def moved_since(self, before: EngineUsage | None) -> bool:
        """A process used CPU or read since `before`, or a new one started; a process that
        ended is no progress (its counters just leave the sum)."""
        if before is None:
            return False
        was = {(p.pid, p.start): p for p in before.processes}
        for p in self.processes:
            old = was.get((p.pid, p.start))
            if old is None or p.cpu_ticks > old.cpu_ticks or \
                    (p.read_bytes or 0) > (old.read_bytes or 0) or (p.rchar or 0) > (old.rchar or 0):
                return True
        return False


def usage_probe(container: str) -> Probe[EngineUsage | None]:
    """The container's processes' stat and io files, each line after its path (grep -H);
    nothing when the container is not running."""
    inspect = shlex.join(["docker", "inspect", "-f", "{{.State.Pid}}", container])
    script = (
        f'pid=$({inspect} 2>/dev/null); case "$pid" in ""|0|*[!0-9]*) exit 0;; esac; '
        'echo "CLK_TCK $(getconf CLK_TCK)"; set --; '
        f'for p in $(cat /proc/[0-9]*/stat 2>/dev/null | awk -v root="$pid" '
        f'{shlex.quote(_DESCENDANTS)}); do '
        'set -- "$@" "/proc/$p/stat" "/proc/$p/io"; done; grep -H "" "$@" 2>/dev/null; true')
    return Probe("usage", script, parse_usage, sudo=True)


def parse_usage(out: str, code: int) -> EngineUsage | None:
    """The probe's output -> the processes' counters; None when no process was found."""
    tck, stats = 100, {}
    ios: dict[int, dict[str, int]] = {}
    for line in out.splitlines():
        if line.startswith("CLK_TCK "):
            value = line.split()[-1]
            tck = int(value) if value.isdigit() and int(value) > 0 else tck
            continue
        m = _LINE.match(line)
        if not m:
            continue
        pid, kind, text = int(m.group(1)), m.group(2), m.group(3)
        if kind == "stat":
            stats[pid] = text
        else:
            key, _, value = text.partition(":")
            if value.strip().isdigit():
                ios.setdefault(pid, {})[key] = int(value)
    found = tuple(p for p in (_process(pid, text, ios.get(pid, {}))
                              for pid, text in sorted(stats.items())) if p)
    return EngineUsage(tck, found) if code == 0 and found else None


def _process(pid: int, stat: str, io: dict[str, int]) -> ProcessUsage | None:
    fields = stat.rpartition(") ")[2].split()
    if len(fields) < 20 or not all(f.lstrip("-").isdigit() for f in fields[11:13] + [fields[19]]):
        return None
    # fields[0] is stat field 3 (state): utime/stime are fields 14/15, starttime field 22.
    return ProcessUsage(pid, int(fields[19]), int(fields[11]) + int(fields[12]),
                        io.get("read_bytes"), io.get("rchar"))

"""dockerd's setup on a node as our reads of it print it: /etc/docker/daemon.json (a JSON
object, kept whole: the nvme step merges its data-root into it), and the NVIDIA hooks and CDI
specs found on dockerd's PATH (steps/disks/docker_host.py's script: one `hook PATH` or `cdi PATH`
line per file)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

DATA_ROOT = "data-root"
# data-root's name before docker 17.05, still read until 23.0; a file with both makes dockerd
# refuse to start (moby daemon/config/config.go, getConflictFreeConfiguration: `cannot specify
# both "graph" and "data-root" config file options`).
GRAPH = "graph"


@dataclass(frozen=True)
class DaemonJson:
    """daemon.json's settings ({} when there is no file: docker runs on defaults)."""
    settings: dict[str, object] = field(default_factory=dict)

    @property
    def data_root(self) -> object:
        return self.settings.get(DATA_ROOT, self.settings.get(GRAPH))

    def with_data_root(self, path: str) -> str:
        """The file's text with data-root set (in place of "graph"), every other setting kept."""
        kept = {k: v for k, v in self.settings.items() if k != GRAPH}
        return json.dumps({**kept, DATA_ROOT: path}, indent=2, sort_keys=True) + "\n"


def parse_daemon_json(out: str, code: int) -> DaemonJson | None:
    """`cat daemon.json`: None when the file is there but not a JSON object (never clobber
    what cannot be parsed)."""
    if code != 0:
        return DaemonJson()
    try:
        data = json.loads(out) if out.strip() else {}
    except json.JSONDecodeError:
        return None
    return DaemonJson(data) if isinstance(data, dict) else None


@dataclass(frozen=True)
class GpuHooks:
    """Executable NVIDIA hooks on dockerd's PATH and the CDI spec files, by path."""
    hooks: tuple[str, ...] = ()
    cdi_specs: tuple[str, ...] = ()

    @property
    def hook_names(self) -> frozenset[str]:
        return frozenset(path.rsplit("/", 1)[-1] for path in self.hooks)


def parse_gpu_hooks(out: str, code: int) -> GpuHooks:
    found: dict[str, list[str]] = {"hook": [], "cdi": []}
    for line in out.splitlines():
        kind, _, path = line.partition(" ")
        if kind in found and path:
            found[kind].append(path)
    return GpuHooks(tuple(found["hook"]), tuple(found["cdi"]))

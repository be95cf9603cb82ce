"""`ray status` (run in the head's container): how many nodes joined the cluster and what of
its GPUs is in use or held in placement groups.

`ray status` lags: it prints the report the autoscaler monitor writes once per update loop
(every AUTOSCALER_UPDATE_INTERVAL_S = 5 s; ray-2.60.0 python/ray/autoscaler/_private/monitor.py
and constants.py), and "No cluster status. It may take a few seconds ..." before the first
(autoscaler/_private/commands.py debug_status)."""

from __future__ import annotations

import re
from dataclasses import dataclass

NO_STATUS = "No cluster status."      # `ray status` before the monitor's first report
# ray python/ray/autoscaler/_private/util.py get_usage_report: f" {used}/{total} GPU", then
# f" ({pg_used} used of {pg_total} reserved in placement groups)" when placement groups hold
# some; `used` there is real use (reservations subtracted, pg_used added back).
_GPU_USAGE = re.compile(r"^\s*([0-9.]+)/([0-9.]+)\s+GPU\b(?:\s*\(([0-9.]+) used of ([0-9.]+) "
                        r"reserved in placement groups\))?", re.M)
_ACTIVE_NODE = re.compile(r"^\s*(\d+)\s+\S+\s*$")   # " 1 node_<id>" or " 2 <node type>"


@dataclass(frozen=True)
class GpuUsage:
    """The report's GPU line."""
    gpus: float = 0.0             # the cluster's total
    gpus_used: float = 0.0        # in use by tasks and actors
    gpus_reserved: float = 0.0    # held in placement groups, in use or not


@dataclass(frozen=True)
class RayStatus(GpuUsage):
    """The cluster as the monitor's last report counts it; `reported` False (and nothing
    counted) before its first report."""
    nodes: int = 0
    reported: bool = True

    @property
    def holds_gpus(self) -> bool:
        """Some GPU is in use, or reserved by a placement group."""
        return self.gpus_used > 0 or self.gpus_reserved > 0


def gpu_usage(out: str) -> GpuUsage:
    gpu = _GPU_USAGE.search(out)
    if not gpu:
        return GpuUsage()
    return GpuUsage(float(gpu.group(2)), float(gpu.group(1)), float(gpu.group(4) or 0.0))


def parse_status(out: str, code: int) -> RayStatus | None:
    """None when Ray does not answer."""
    if code == 0 and NO_STATUS in out and "Active:" not in out:
        return RayStatus(reported=False)
    if code != 0 or "Active:" not in out:
        return None
    active = out.split("Active:", 1)[1].split("Pending:", 1)[0]
    nodes = sum(int(m.group(1)) for m in map(_ACTIVE_NODE.match, active.splitlines()) if m)
    usage = gpu_usage(out)
    return RayStatus(usage.gpus, usage.gpus_used, usage.gpus_reserved, nodes=nodes)

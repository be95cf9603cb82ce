"""The 4x8 H100 job's weights-ready time from a bench's measured CPU cost per byte.

Each of the `nodes` nodes fetches 1/nodes of the checkpoint from the Hub, receives the rest from
its peers and sends its own share to each of them; every byte it keeps is written to its NVMe once.
Those four streams run at once, so weights-ready is the longest of four bounds:
  - the Hub leg: the node's share over its Hub link;
  - the private network: the larger of what it receives and what it sends, over that link;
  - the NVMe: the whole checkpoint at the drive's write rate;
  - the CPU: the CPU-seconds the node's downloader and peer server spend on those bytes (the
    bench's CPU-s per GB, Hub path over TLS, peer receiver, peer server), over the cores the
    downloader can use: all of them when it spreads its work over processes, else one (one
    interpreter lock).
"""
from __future__ import annotations

CHECKPOINT_BYTES = 1.56e12
SHARDS = 96


def project(hub: dict, peer: dict, nodes: int = 4, cores: int = 64, hub_gbit: float = 25.0,
            private_gbit: float = 100.0, nvme_gbps: float = 3.5, parallel: bool = False) -> dict:
    """hub, peer: a bench's figures (cpu_s_per_GB or, where measured, its figure past start-up;
    server_cpu_s_per_GB); parallel: the
    downloader spread its work over processes in that bench (else it is held to one core)."""
    gb = CHECKPOINT_BYTES / 1e9
    hub_share = gb / nodes
    received = sent = gb - hub_share
    cpu_s = (hub_share * _per_gb(hub) + received * _per_gb(peer) + sent * peer["server_cpu_s_per_GB"])
    usable = cores if parallel else 1
    bounds = {"hub_link_s": hub_share / (hub_gbit / 8), "private_link_s": max(received, sent) / (private_gbit / 8),
              "nvme_s": gb / nvme_gbps, "cpu_s": cpu_s / usable}
    binding = max(bounds, key=bounds.get)
    return {"projection": f"{nodes}x8 H100, {gb:.0f} GB in {SHARDS} shards",
            "node": {"cores": cores, "hub_gbit": hub_gbit, "private_gbit": private_gbit, "nvme_GBps": nvme_gbps,
                     "cores_the_downloader_uses": usable},
            "per_node_GB": {"hub": round(hub_share), "from_peers": round(received), "to_peers": round(sent)},
            "node_cpu_seconds": round(cpu_s),
            **{k: round(v) for k, v in bounds.items()},
            "binding": binding[:-2], "weights_ready_minutes": round(bounds[binding] / 60, 1)}


def _per_gb(run: dict) -> float:
    """The client's CPU per GB past start-up where the bench measured it: a node's 390 GB
    share makes start-up nothing."""
    return run.get("cpu_s_per_GB_after_start", run["cpu_s_per_GB"])

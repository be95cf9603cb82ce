"""The 4x8 H100 job past weights-ready: the engine's load, then its start-up, to a serving endpoint.

Every rank reads every tensor of every shard: SGLang's DefaultModelLoader iterates
`safetensors_weights_iterator` (srt/model_loader/weight_utils.py: `safe_open` each file, then
`get_tensor` for every name) and each rank's weight_loader keeps its own slice. The files are
mmap'ed, so the ranks of one node share the page cache:
  - the NVMe: what is not already in the page cache is read from the drive. k3deploy's downloader
    writes with O_DIRECT (remote/direct_io.py), so after a download the cache holds none of it
    (cold); a relaunch on a node whose RAM holds the checkpoint finds it there (warm). A node
    whose RAM is smaller than the checkpoint cannot keep a shard for the ranks that come after,
    so each of its ranks reads the checkpoint from the drive (the bound's worst case);
  - a rank: the checkpoint over one rank's deserialize-and-copy rate. The default, 0.87 GB/s, is
    one report's figure, not a measurement here: a ~1800 s load of the 1.56 TB checkpoint with
    every rank reading it (sgl-project/sglang#39568, 4x4 GB200);
then start-up (CUDA graphs, kernels): 7 min cold, 1m44s with the kernels cached, as ModelExpress
measured for DeepSeek-V4 (shared/reference/field-notes.md); k3deploy keeps the compile caches on
the NVMe across relaunches. Every figure is a parameter; none was measured on a GPU here.
"""
from __future__ import annotations

from benchproject import CHECKPOINT_BYTES

STARTUP_COLD_S = 420.0
STARTUP_CACHED_S = 104.0


def project_serving(weights_ready_minutes: float, ranks_per_node: int = 8, node_ram_gb: float = 2048.0,
                    nvme_read_gbps: float = 3.5, rank_load_gbps: float = 0.87,
                    warm: bool = False, kernels_cached: bool = False) -> dict:
    gb = CHECKPOINT_BYTES / 1e9
    fits = node_ram_gb > gb
    reads = 0 if (warm and fits) else (1 if fits else ranks_per_node)
    bounds = {"nvme_read_s": reads * gb / nvme_read_gbps, "rank_read_s": gb / rank_load_gbps}
    binding = max(bounds, key=lambda k: bounds[k])
    load_s = bounds[binding]
    startup_s = STARTUP_CACHED_S if kernels_cached else STARTUP_COLD_S
    serving_minutes = weights_ready_minutes + (load_s + startup_s) / 60
    return {"serving_projection": "warm page cache" if warm else "cold page cache (O_DIRECT download)",
            "node": {"ranks": ranks_per_node, "ram_GB": node_ram_gb, "nvme_read_GBps": nvme_read_gbps,
                     "rank_load_GBps": rank_load_gbps, "checkpoint_fits_page_cache": fits},
            "checkpoint_reads_from_nvme": reads,
            **{k: round(v) for k, v in bounds.items()},
            "load_binding": binding[:-2], "load_minutes": round(load_s / 60, 1),
            "startup_minutes": round(startup_s / 60, 1), "kernels_cached": kernels_cached,
            "weights_ready_minutes": weights_ready_minutes,
            "serving_minutes": round(serving_minutes, 1)}

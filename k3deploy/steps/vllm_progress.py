"""What `vllm serve` prints while it starts, read from its log: loading progress, the group
formed, the server up. vLLM-only lines, so the wait step can ask them of any engine's log.

The lines are vLLM 0.33.0's (tests/fixtures/real/vllm/): the engine core logs "Starting to load
model ..." once every rank passed distributed init (v1/worker/gpu_model_runner.py, global first
rank); torch.distributed rank 0 draws the tqdm bar "Loading safetensors checkpoint shards:
NN% Completed | n/N [...]" (model_loader/weight_utils.py; "(eager)" with that load strategy,
and older releases print no "Completed |"); then "Model loading took ..." and, on the API
server, "Starting vLLM server on URL" and uvicorn's "Application startup complete.".
"""

from __future__ import annotations

import re

_BAR = re.compile(r"Loading safetensors checkpoint shards(?: \(\w+\))?:\s*(\d+)%"
                  r"(?: Completed \|)?\s*(\d+)/(\d+)")
STARTED_LOADING = "] Starting to load model "
LOADED = "] Model loading took "
READY = ("] Starting vLLM server on ", "INFO:     Application startup complete.")


def shards(log: str) -> tuple[int, int] | None:
    """(shards loaded, shards) from the last progress line, or None before the first."""
    found = _BAR.findall(log)
    return (int(found[-1][1]), int(found[-1][2])) if found else None


def formed(log: str) -> bool:
    """The ranks formed their group: loading started (or is already done)."""
    return STARTED_LOADING in log or LOADED in log or shards(log) is not None


def ready(log: str) -> bool:
    return any(marker in log for marker in READY)


def shown(line: str) -> bool:
    """A line worth showing the user while waiting."""
    return bool(_BAR.search(line)) or LOADED in line or ready(line)

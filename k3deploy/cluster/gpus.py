"""The GPU table: every GPU model k3deploy knows, in one place.

Add a model by adding one GpuModel to GPUS. Memory is the nominal HBM size the guide uses
(decimal GB); what is actually usable is an assumption of sizing.py, not of this table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuModel:
    key: str  # what users type: --gpu h100, inventory gpu.model
    name: str  # what tables show
    memory_gb: float  # nominal HBM per GPU, decimal GB (the guide's figures)
    fp4_native: bool  # FP4 tensor cores: MXFP4 runs natively instead of via marlin W4A16
    smi_names: tuple[str, ...]  # exact `nvidia-smi --query-gpu=name` strings seen in the wild
    smi_pattern: str  # fallback regex (case-insensitive) for names not listed above
    gpus_per_node: int = 8  # GPUs in one node as clouds rent it (GB200: one 4-GPU tray)


GPUS: dict[str, GpuModel] = {
    g.key: g
    for g in (
        GpuModel(
            "h100", "H100 SXM5", 80.0, False,
            ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H100 SXM5 80GB"),
            # the H100 NVL is a 94 GB card: a different row, so it must not match here
            r"\bh100\b(?!.*\bnvl\b)",
        ),
        GpuModel(
            "h200", "H200 SXM5", 141.0, False,
            ("NVIDIA H200", "NVIDIA H200 NVL"),
            r"\bh200\b",
        ),
        GpuModel(
            "b200", "B200", 192.0, True,
            ("NVIDIA B200",),
            r"\bb200\b",
        ),
        GpuModel(
            "b300", "B300 SXM6", 288.0, True,
            ("NVIDIA B300", "NVIDIA B300 SXM6 AC"),
            r"\bb300\b",  # \b keeps "NVIDIA GB300" out
        ),
        GpuModel(
            "gb200", "GB200 NVL72", 186.0, True,
            ("NVIDIA GB200",),
            r"\bgb200\b",
            gpus_per_node=4,
        ),
    )
}


def get_gpu(key: str | GpuModel) -> GpuModel:
    """The table row for a user-given key ("h100", "B300"); ValueError names the known ones."""
    if isinstance(key, GpuModel):
        return key
    gpu = GPUS.get(str(key).strip().lower())
    if gpu is None:
        raise ValueError(f"unknown GPU model {key!r}; known: {', '.join(GPUS)}")
    return gpu


def match_smi_name(smi_name: str) -> GpuModel | None:
    """The table row for an nvidia-smi GPU name, or None when k3deploy does not know the card."""
    wanted = " ".join(smi_name.split()).casefold()
    for gpu in GPUS.values():
        if any(wanted == n.casefold() for n in gpu.smi_names):
            return gpu
    for gpu in GPUS.values():
        if re.search(gpu.smi_pattern, wanted, flags=re.IGNORECASE):
            return gpu
    return None

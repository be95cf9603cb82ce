"""Whether GPUDirect RDMA can work on a node before NCCL has said (after it has, its own lines
decide: facts/nccl.py).

NCCL registers GPU memory with the NIC one of two ways: through nvidia_peermem
(/sys/module/nvidia_peermem, facts/fabric.py), or through DMA-BUF with no peer-memory module
(NCCL_DMABUF_ENABLE, default 1; NVIDIA/nccl 2.30.7 src/init.cc:405-416 asks the GPU for
CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED). DMA-BUF export needs the open GPU kernel modules
("Driver version: 515.43.04+ w/ OpenRM", NVIDIA/nccl#682) and Linux 5.12 or later
(aws/aws-ofi-nccl#848: "Running on a kernel version older than 5.12" disables it).
/proc/driver/nvidia/version names the flavour: "NVRM version: NVIDIA UNIX Open Kernel Module
for x86_64 ..." for the open modules, "NVRM version: NVIDIA UNIX x86_64 Kernel Module ..." for
the proprietary ones (NVIDIA's README kernel_open.html, quoted in
NVIDIA/open-gpu-kernel-modules#171)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from k3deploy.facts import Probe

NV_VERSION = "/proc/driver/nvidia/version"
_NVRM = re.compile(r"^NVRM version: NVIDIA UNIX (Open )?")
_KERNEL = re.compile(r"^(\d+)\.(\d+)")
DMABUF_KERNEL = (5, 12)


@dataclass(frozen=True)
class DmaBuf:
    open_modules: bool | None    # None: no driver version file (no driver, or not readable)
    kernel: str | None           # `uname -r`

    @property
    def supported(self) -> bool | None:
        """DMA-BUF export possible; None when either half is unknown."""
        m = _KERNEL.match(self.kernel or "")
        if self.open_modules is None or not m:
            return None
        return self.open_modules and (int(m.group(1)), int(m.group(2))) >= DMABUF_KERNEL


def probe() -> Probe[DmaBuf]:
    # the version file's lines, then the kernel release on the last line
    return Probe("gpu_dmabuf", f"cat {NV_VERSION} 2>/dev/null; uname -r", parse_dmabuf)


def parse_dmabuf(out: str, code: int) -> DmaBuf:
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    nvrm = next((m for line in lines if (m := _NVRM.match(line))), None)
    kernel = lines[-1] if lines and _KERNEL.match(lines[-1]) else None
    return DmaBuf(bool(nvrm.group(1)) if nvrm else None, kernel)


def support(peermem: bool, dmabuf: DmaBuf | None) -> tuple[bool | None, str]:
    """(GPUDirect RDMA possible, why): True with nvidia_peermem or DMA-BUF, False when the
    node rules both out, None ("unknown", not "off") when nothing says."""
    if peermem:
        return True, "nvidia_peermem loaded"
    supported = dmabuf.supported if dmabuf else None
    if dmabuf is None or supported is None:
        return None, (f"nvidia_peermem not loaded, and {NV_VERSION} or the kernel release "
                      "could not be read to tell whether DMA-BUF can stand in")
    if supported:
        return True, f"DMA-BUF (open kernel modules, kernel {dmabuf.kernel})"
    why = "the proprietary kernel modules" if not dmabuf.open_modules else \
        f"kernel {dmabuf.kernel} (DMA-BUF needs 5.12 or later)"
    return False, f"nvidia_peermem not loaded, and no DMA-BUF with {why}"

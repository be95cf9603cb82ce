"""The node's disks: the HF cache, docker's data-root and containerd's root on NVMe."""

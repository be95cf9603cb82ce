"""k3deploy: bring Kimi K3 up on multi-node GPU clusters over SSH, and back down."""

__version__ = "0.1.0"

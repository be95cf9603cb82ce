"""Whether a directory's file system takes O_DIRECT on a device, asked without the code under
test: the tests of the direct path run only there, and say so when they cannot."""
from __future__ import annotations

import os
from pathlib import Path

import k3deploy.remote.fetch_weights  # noqa: F401  (puts the node-side modules on sys.path)
import direct_io  # noqa: E402


def takes_o_direct(directory: Path) -> bool:
    """Not kept in memory (tmpfs takes O_DIRECT but has no device), and an O_DIRECT open of a
    file there succeeds."""
    if direct_io.fs_type(os.stat(directory).st_dev) in direct_io.IN_MEMORY:
        return False
    probe = directory / ".o_direct_probe"
    probe.write_bytes(b"")
    try:
        os.close(os.open(probe, os.O_RDWR | os.O_DIRECT))
        return True
    except OSError:
        return False
    finally:
        probe.unlink()

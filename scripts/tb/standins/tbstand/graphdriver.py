"""dockerd's storage driver at start, for the legacy image store: overlay2 refused on a
filesystem without d_type when daemon.json names it.

moby v28.5.1: daemon/graphdriver/overlay2/overlay.go Init returns
overlayutils.ErrDTypeNotSupported("overlay2", backingFs) when fs.SupportsDType is false
(daemon/graphdriver/overlayutils/overlayutils.go: the message, with the xfs advice); a
configured driver's error is fatal (daemon/graphdriver/driver.go New: getDriver(driverName)),
wrapped by layer/layer_store.go NewStoreFromOptions ("error initializing graphdriver: %v: %s")
and cmd/dockerd/daemon.go ("failed to start daemon"). Without a configured driver, New skips a
not-supported overlay2 and takes the next one: no failure, so none here either. The containerd
image store uses containerd's snapshotter, not this path.

Which filesystem lacks d_type is the node's setting `no_dtype_under` (a path: profile
nvme-xfs-ftype0 puts the NVMe there), an xfs made with `mkfs.xfs -n ftype=0`.
"""
import os

from . import runtime

DTYPE = ("overlay2: the backing xfs filesystem is formatted without d_type support, which leads "
         "to incorrect behavior. Reformat the filesystem with ftype=1 to enable d_type support. "
         "Backing filesystems without d_type support are not supported.")


def _under(path, top):
    path, top = os.path.normpath(path), os.path.normpath(top)
    return path == top or path.startswith(top.rstrip("/") + "/")


def check(config, root, store):
    """(config, None), or (None, dockerd's error line) when the driver refuses the root."""
    driver = config.get("storage-driver")
    under = runtime.node_config().get("no_dtype_under")
    if store != "overlay2" or driver != "overlay2" or not under or not _under(root, under):
        return config, None
    return None, f"failed to start daemon: error initializing graphdriver: {DTYPE}: {driver}"

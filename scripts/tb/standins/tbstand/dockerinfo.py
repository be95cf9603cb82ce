"""What `docker info` and `docker version` report: the engine release of the node's docker
profile, its image store and runtimes (docs in README.md beside this package)."""
import os

from . import containers, images, runtime

DEFAULT_VERSION = "28.5.1"
# API version per engine release: (current, minimum) as moby declares them (api/common.go and
# daemon/config/config.go@v28.5.1: 1.51, 1.24; daemon/config/config.go@docker-v29.1.2: 1.52, 1.44).
API_VERSIONS = {"28": ("1.51", "1.24"), "29": ("1.52", "1.44")}


def version():
    return runtime.node_config().get("docker_version", DEFAULT_VERSION)


def api_versions():
    return API_VERSIONS.get(version().split(".")[0], API_VERSIONS["28"])


# DriverStatus as each store reports it: overlay2's Status() (moby daemon/graphdriver/overlay2;
# docker/cli cli/command/system/testdata/docker-info-with-swarm.json.golden shows the shape)
# and the containerd store's LayerStoreStatus (daemon/containerd/service.go@docker-v29.1.2).
DRIVER_STATUS = {"overlay2": [["Backing Filesystem", "extfs"], ["Supports d_type", "true"],
                              ["Using metacopy", "false"], ["Native Overlay Diff", "true"],
                              ["userxattr", "false"]],
                 "containerd": [["driver-type", "io.containerd.snapshotter.v1"]]}


def runtimes_doc(state):
    """`nvidia` is there only when daemon.json declares it (`nvidia-ctk runtime configure`
    writes it: NVIDIA/nvidia-container-toolkit cmd/nvidia-ctk/runtime/configure); the GPU
    hook on PATH adds no runtime."""
    runtimes = {"io.containerd.runc.v2": {"path": "runc", "status": {}},
                "runc": {"path": "runc", "status": {}}}
    for name, spec in ((state.get("config") or {}).get("runtimes") or {}).items():
        runtimes[name] = {"path": spec.get("path", "")} if isinstance(spec, dict) else {}
    return runtimes


def info_doc(state):
    node = runtime.node_config()
    all_c = containers.all_containers(state["data_root"])
    running = sum(1 for c in all_c if c.running)
    store = state.get("image_store", "overlay2")
    return {"ID": "K3TB:" + node["name"].upper(), "Containers": len(all_c),
            "ContainersRunning": running, "ContainersPaused": 0,
            "ContainersStopped": len(all_c) - running, "Images": len(images.all_images(state)),
            "Driver": images.store(state).DRIVER, "DriverStatus": DRIVER_STATUS[store],
            "DockerRootDir": state["data_root"], "ServerVersion": version(),
            "Runtimes": runtimes_doc(state),
            "DefaultRuntime": state.get("config", {}).get("default-runtime", "runc"),
            "NCPU": os.cpu_count(), "MemTotal": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
            "Name": node["name"], "OperatingSystem": "Ubuntu 22.04.5 LTS", "OSType": "linux",
            "Architecture": "x86_64", "KernelVersion": os.uname().release, "CgroupDriver": "systemd",
            "CgroupVersion": "2", "LoggingDriver": "json-file", "Warnings": None}

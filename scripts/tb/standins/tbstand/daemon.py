"""The simulated dockerd: its systemd units' state and the config it read when it started.

State lives in $K3TB_RUN/docker/daemon-state.json: {"service": active|inactive|failed,
"socket": active|inactive, "data_root", "image_store", "gpu_hook", "since", "error",
"containerd": active|inactive, "containerd_root"}. daemon.json is read only when the service
starts, so editing it without a restart changes nothing, as with the real daemon; the same
holds for containerd and /etc/containerd/config.toml.
"""
import json
import os
import time

from . import dockerunit, runtime

DEFAULT_ROOT = "/var/lib/docker"
CONTAINERD_ROOT = "/var/lib/containerd"
# dockerd uses the system containerd when this exists (an os.Lstat, when dockerd starts), else
# starts its own with root <data-root>/containerd/daemon (moby daemon/command/daemon.go and
# daemon/internal/libcontainerd/supervisor/remote_daemon.go@docker-v29.1.2).
CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
# dockerd under systemd runs with systemd's fixed PATH (systemd.exec(5), "Environment
# variables in spawned processes"; /sbin:/bin added on split-usr builds), and looks the NVIDIA
# hook up on it once, when it starts (moby daemon/devices_nvidia_linux.go@v28.5.1 and
# @docker-v29.1.2, init(): exec.LookPath("nvidia-container-runtime-hook")).
DOCKERD_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
NVIDIA_HOOK = "nvidia-container-runtime-hook"
# dockerd refuses to start on a key it does not know; this is its documented daemon.json set.
KNOWN_KEYS = {
    "allow-nondistributable-artifacts", "api-cors-header", "authorization-plugins", "bip",
    "bip6", "bridge", "builder", "cdi-spec-dirs", "cgroup-parent", "containerd",
    "containerd-namespace", "containerd-plugins-namespace", "data-root", "debug",
    "default-address-pools", "default-cgroupns-mode", "default-gateway", "default-gateway-v6",
    "default-ipc-mode", "default-network-opts", "default-runtime", "default-shm-size",
    "default-ulimits", "dns", "dns-opts", "dns-search", "exec-opts", "exec-root",
    "experimental", "features", "fixed-cidr", "fixed-cidr-v6", "group", "host-gateway-ip",
    "hosts", "icc", "init", "init-path", "insecure-registries", "ip", "ip-forward",
    "ip-masq", "iptables", "ip6tables", "ipv6", "labels", "live-restore", "log-driver",
    "log-format", "log-level", "log-opts", "max-concurrent-downloads",
    "max-concurrent-uploads", "max-download-attempts", "metrics-addr", "mtu",
    "no-new-privileges", "node-generic-resources", "oom-score-adjust", "pidfile",
    "proxies", "raw-logs", "registry-mirrors", "runtimes", "seccomp-profile",
    "selinux-enabled", "shutdown-timeout", "storage-driver", "storage-opts", "swarm-default-advertise-addr",
    "tls", "tlscacert", "tlscert", "tlskey", "tlsverify", "userland-proxy",
    "userland-proxy-path", "userns-remap",
}


def docker_dir():
    return os.path.join(runtime.run_dir(), "docker")


def _state_path():
    return os.path.join(docker_dir(), "daemon-state.json")


def _lock_path():
    return os.path.join(docker_dir(), "daemon.lock")


def read_daemon_json():
    """The daemon's config as dockerd would load it: (config dict, None) or (None, error)."""
    path = os.path.join(runtime.etc_docker(), "daemon.json")
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return {}, None
    prefix = f"unable to configure the Docker daemon with file {path}: "
    try:
        config = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as e:
        return None, prefix + f"invalid character at line {e.lineno} column {e.colno}: {e.msg}"
    if not isinstance(config, dict):
        return None, prefix + "json: cannot unmarshal into Go value of type map[string]interface {}"
    unknown = sorted(set(config) - KNOWN_KEYS)
    if unknown:
        return None, prefix + "the following directives don't match any configuration option: " + ", ".join(unknown)
    if not isinstance(config.get("data-root", ""), str):
        return None, prefix + "data-root must be a string"
    return config, None


def canonical_root(root):
    """The data-root as dockerd keeps and reports it: absolute, symlinks evaluated, when it
    exists (moby daemon/daemon.go@docker-v29.1.2 CreateDaemonRoot, resolveSymlinkedDirectory:
    filepath.Abs then filepath.EvalSymlinks); as configured when it does not exist yet."""
    host = runtime.host_path(root)
    if not os.path.isdir(host):
        return root
    real = os.path.realpath(host)
    rootfs = os.environ.get("K3TB_ROOTFS")
    return "/" + os.path.relpath(real, os.path.realpath(rootfs)) if rootfs else real


def gpu_hook():
    """Where dockerd finds nvidia-container-runtime-hook on its PATH, or None."""
    for d in DOCKERD_PATH:
        if os.access(runtime.host_path(os.path.join(d, NVIDIA_HOOK)), os.X_OK):
            return os.path.join(d, NVIDIA_HOOK)
    return None


def image_store(config):
    """Docker 29 uses containerd's image store on fresh installs, the legacy one on hosts
    upgraded from <= 28 (node.json image_store says which this node is); daemon.json's
    features.containerd-snapshotter overrides either (docs.docker.com/engine/storage/containerd)."""
    chosen = (config.get("features") or {}).get("containerd-snapshotter")
    if chosen is None:
        return runtime.node_config().get("image_store", "overlay2")
    return "containerd" if chosen else "overlay2"


def read_containerd_root():
    """containerd's `root` from config.toml (default /var/lib/containerd), or (None, error)."""
    import tomllib  # only when containerd starts
    path = os.path.join(runtime.etc_containerd(), "config.toml")
    try:
        with open(path, "rb") as f:
            config = tomllib.load(f)
    except FileNotFoundError:
        return CONTAINERD_ROOT, None
    except tomllib.TOMLDecodeError as e:
        return None, f"failed to load TOML from {path}: {e}"
    root = config.get("root") or CONTAINERD_ROOT
    return (root, None) if isinstance(root, str) else (None, f"{path}: root must be a string")


def start_containerd(state):
    root, error = read_containerd_root()
    if root is None:
        state.update(containerd="failed", containerd_error=error)
        return False
    state.update(containerd="active", containerd_root=root, containerd_error=None)
    return True


def _try_start(state):
    """Start the service in `state` (under the lock). Returns True when it runs afterwards."""
    config, error = read_daemon_json()
    flag_root = dockerunit.flag_data_root()
    if config is not None and flag_root and "data-root" in config:
        # moby daemon/config/config.go@docker-v29.1.2 findConfigurationConflicts (printConflict)
        config, error = None, (
            f"unable to configure the Docker daemon with file {runtime.etc_docker()}/daemon.json: "
            "the following directives are specified both as a flag and in the configuration "
            f"file: data-root: (from flag: {flag_root}, from file: {config['data-root']})")
    root = flag_root or (config or {}).get("data-root") or DEFAULT_ROOT
    if config is not None:
        reported = canonical_root(root)
        try:
            os.makedirs(runtime.host_path(root), exist_ok=True)
        except OSError as e:
            config, error = None, f"failed to create data root {root}: {e.strerror}"
    state.update(socket="active", since=time.time())
    if config is None:
        state.update(service="failed", error=error)
        return False
    state.update(service="active", data_root=reported, error=None, config=config,
                 image_store=image_store(config), gpu_hook=gpu_hook(),
                 system_containerd=os.path.lexists(runtime.host_path(CONTAINERD_SOCKET)),
                 pid=4000 + int(time.time()) % 5000)
    return True


def _load_locked():
    state = runtime.read_json(_state_path())
    if state is None:  # first look at this node: the daemon came up at boot
        state = {"service": "inactive", "socket": "active", "data_root": DEFAULT_ROOT}
        start_containerd(state)
        _try_start(state)
        _save(state)
    return state


def _save(state):
    os.makedirs(docker_dir(), exist_ok=True)
    runtime.write_json_atomic(_state_path(), state)


def status():
    with runtime.locked(_lock_path()):
        return _load_locked()


def start(units):
    """systemctl start: the socket and/or the service (the service pulls in its socket)."""
    restart_containers = False
    with runtime.locked(_lock_path()):
        state = _load_locked()
        if "docker.socket" in units:
            state["socket"] = "active"
        state["result"] = None
        if "docker.service" in units and state["service"] != "active":
            if dockerunit.limit_hit(state):
                state.update(service="failed", result="start-limit-hit")
            else:
                restart_containers = _try_start(state)
                dockerunit.count_start(state, failed=not restart_containers)
        _save(state)
    if restart_containers:
        _containers().start_after_daemon_start()
    return state["service"] == "active" or "docker.service" not in units


def reset_failed():
    with runtime.locked(_lock_path()):
        state = _load_locked()
        dockerunit.reset_failed(state)
        _save(state)


def stop(units):
    """systemctl stop; stopping docker.socket also stops docker.service (Requires=)."""
    with runtime.locked(_lock_path()):
        state = _load_locked()
        stopping_service = state["service"] == "active" and (
            "docker.service" in units or "docker.socket" in units)
    if stopping_service:
        _containers().stop_all_for_shutdown()
    with runtime.locked(_lock_path()):
        state = _load_locked()
        if "docker.service" in units or "docker.socket" in units:
            if state["service"] == "active":
                state.update(service="inactive", since=time.time())
        if "docker.socket" in units:
            state["socket"] = "inactive"
        _save(state)
    return state


def start_containerd_unit():
    """systemctl start containerd: config.toml's root is read now. dockerd keeps running and
    talks to the restarted containerd, so with the containerd image store it sees the images
    under the new root from its next call (docker.service Wants=containerd.service, not
    BindsTo=)."""
    with runtime.locked(_lock_path()):
        state = _load_locked()
        ok = state.get("containerd") == "active" or start_containerd(state)
        _save(state)
    return ok


def stop_containerd_unit():
    with runtime.locked(_lock_path()):
        state = _load_locked()
        state["containerd"] = "inactive"
        _save(state)


def running_daemon():
    """The state of a daemon a client can talk to, or None. An active docker.socket starts a
    stopped service on the first client connection, as systemd socket activation does."""
    with runtime.locked(_lock_path()):
        state = _load_locked()
        if state["service"] == "active":
            return state
        if state["socket"] != "active" or not _try_start(state):
            _save(state)
            return None
        _save(state)
    _containers().start_after_daemon_start()
    return state


def _containers():
    from . import lifecycle  # lifecycle imports daemon for the data root; avoid a cycle
    return lifecycle

"""The simulated dockerd: its systemd units' state and the config it read when it started.

State lives in $K3TB_RUN/docker/daemon-state.json: {"service": active|inactive|failed,
"socket": active|inactive, "data_root", "since", "error"}. daemon.json is read only when the
service starts, so editing it without a restart changes nothing, as with the real daemon.
"""
import json
import os
import time

from . import runtime

DEFAULT_ROOT = "/var/lib/docker"
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


def _try_start(state):
    """Start the service in `state` (under the lock). Returns True when it runs afterwards."""
    config, error = read_daemon_json()
    root = (config or {}).get("data-root") or DEFAULT_ROOT
    if config is not None:
        try:
            os.makedirs(runtime.host_path(root), exist_ok=True)
        except OSError as e:
            config, error = None, f"failed to create data root {root}: {e.strerror}"
    state.update(socket="active", since=time.time())
    if config is None:
        state.update(service="failed", error=error)
        return False
    state.update(service="active", data_root=os.path.normpath(root), error=None,
                 config=config, pid=4000 + int(time.time()) % 5000)
    return True


def _load_locked():
    state = runtime.read_json(_state_path())
    if state is None:  # first look at this node: the daemon came up at boot
        state = {"service": "inactive", "socket": "active", "data_root": DEFAULT_ROOT}
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
        if "docker.service" in units and state["service"] != "active":
            restart_containers = _try_start(state)
        _save(state)
    if restart_containers:
        _containers().start_after_daemon_start()
    return state["service"] == "active" or "docker.service" not in units


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

"""A node's host-side directories (DIR/nodes/<name>/...) and its users.

Everything here is what the node's init bind-mounts over the real paths inside its private
mount namespace (see node.py). `prepare` makes a fresh machine: called on `up` and on
`revive-node`; only the SSH host key and the stand-in call log survive a revive.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

from tb.nodespec import NodeSpec

NODE_PATH = "/usr/local/bin:/usr/local/sbin:/usr/bin:/bin:/usr/sbin:/sbin"
# Mount points that must exist on the host for the node's mounts (empty dirs, left in place).
HOST_MOUNT_POINTS = ("/mnt/nvme", "/etc/docker", "/var/lib/docker", "/run/k3tb", "/run/sshd",
                     "/etc/containerd", "/var/lib/containerd", "/usr/local/sbin", "/run/containerd",
                     "/mnt/k3tb-shared", "/opt/k3tb-router-site")
# Where each node sees the laptop venv's site-packages holding smg (the router image runs the
# real SMG from it: standins/engine/router.py). A bind mount, as the venv may live under /tmp,
# which a node covers with its own (a clean clone in CI, say).
ROUTER_SITE_MOUNT = "/opt/k3tb-router-site"
# Where `up --shared-hf` mounts the testbed's one HF directory on every node (the inventory's
# paths.hf_home is SHARED_HF_HOME), and the host directory behind it.
SHARED_HF_MOUNT = "/mnt/k3tb-shared"
SHARED_HF_HOME = f"{SHARED_HF_MOUNT}/hf"
FRESH_DIRS = ("etc-docker", "var-lib-docker", "etc-containerd", "var-lib-containerd",
              "usr-local-sbin", "run-containerd", "root-home", "home", "tmp", "etc")
# What the containerd.io package installs as /etc/containerd/config.toml (every docker-ce
# install has it): docker/containerd-packaging common/containerd.toml@655193435b87.
CONTAINERD_TOML = """#   Copyright 2018-2022 Docker Inc.

#   Licensed under the Apache License, Version 2.0 (the "License");
#   you may not use this file except in compliance with the License.
#   You may obtain a copy of the License at

#       http://www.apache.org/licenses/LICENSE-2.0

#   Unless required by applicable law or agreed to in writing, software
#   distributed under the License is distributed on an "AS IS" BASIS,
#   WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
#   See the License for the specific language governing permissions and
#   limitations under the License.

disabled_plugins = ["cri"]

#root = "/var/lib/containerd"
#state = "/run/containerd"
#subreaper = true
#oom_score = 0

#[grpc]
#  address = "/run/containerd/containerd.sock"
#  uid = 0
#  gid = 0

#[debug]
#  address = "/run/containerd/debug.sock"
#  uid = 0
#  gid = 0
#  level = "info"
"""
# The runtime entry `nvidia-ctk runtime configure --runtime=docker` adds to daemon.json
# (NVIDIA/nvidia-container-toolkit pkg/config/engine/docker/docker.go@d34b3046 AddRuntime,
# cmd/nvidia-ctk/runtime/configure/configure.go: executable nvidia-container-runtime).
NVIDIA_RUNTIME = {"nvidia": {"args": [], "path": "nvidia-container-runtime"}}
# The toolkit's prestart hook, which dockerd looks up on its PATH for `--gpus` (the package
# installs it in /usr/bin; a testbed node cannot change /usr/bin, so it is in /usr/local/sbin,
# also on dockerd's PATH). Never run: the docker stand-in only looks it up, as dockerd does.
HOOK_STANDIN = "#!/bin/sh\necho 'k3tb: nvidia-container-runtime-hook is looked up, never run' >&2\nexit 1\n"
UBUNTU_SUDOERS = "ubuntu ALL=(ALL) NOPASSWD:ALL\n"


def node_dir(tb_dir: Path, name: str) -> Path:
    return Path(tb_dir) / "nodes" / name


def shared_hf_dir(tb_dir: Path) -> Path:
    return Path(tb_dir) / "shared-hf"


HOST_MOUNT_FILES = ("/etc/hostname", "/etc/hosts", "/etc/machine-id")


def ensure_host_mount_points() -> None:
    for path in HOST_MOUNT_POINTS:
        os.makedirs(path, mode=0o755, exist_ok=True)
    for path in HOST_MOUNT_FILES:
        if not os.path.exists(path):
            Path(path).touch(mode=0o644)


def ubuntu_ids() -> tuple[int, int]:
    """uid/gid for the nodes' `ubuntu` user: the host's if it has one, else the first free >= 1000."""
    passwd = [line.split(":") for line in Path("/etc/passwd").read_text().splitlines() if line]
    groups = [line.split(":") for line in Path("/etc/group").read_text().splitlines() if line]
    for fields in passwd:
        if fields[0] == "ubuntu":
            return int(fields[2]), int(fields[3])
    used = {int(f[2]) for f in passwd} | {int(f[2]) for f in groups}
    uid = next(i for i in range(1000, 60000) if i not in used)
    return uid, uid


def prepare(tb_dir: Path, spec: NodeSpec, address: str, authorized_key: str) -> Path:
    """Lay out a fresh machine's directories for spec; returns the node dir."""
    ndir = node_dir(tb_dir, spec.name)
    for sub in FRESH_DIRS:
        shutil.rmtree(ndir / sub, ignore_errors=True)
    uid, gid = ubuntu_ids()
    _write_users(ndir / "etc", uid, gid)
    _write_hosts(ndir / "etc", spec.name, address)
    _write_identity(ndir)
    _write_homes(ndir, uid, gid)
    _write_docker_config(ndir, spec)
    _write_ssh(ndir, spec.name, address)
    _write_runtime(ndir, spec, authorized_key)
    return ndir


def _write_users(etc: Path, uid: int, gid: int) -> None:
    etc.mkdir(parents=True)
    passwd = _without_user(Path("/etc/passwd").read_text(), "ubuntu")
    passwd += f"ubuntu:x:{uid}:{gid}:Ubuntu:/home/ubuntu:/bin/bash\n"
    group = _without_user(Path("/etc/group").read_text(), "ubuntu") + f"ubuntu:x:{gid}:\n"
    # sshd (UsePAM no) refuses accounts whose password field starts with '!': key-only is '*'.
    shadow = "".join(_unlocked(line) + "\n" for line in _without_user(
        Path("/etc/shadow").read_text(), "ubuntu").splitlines())
    shadow += "ubuntu:*:19000:0:99999:7:::\n"
    (etc / "passwd").write_text(passwd)
    (etc / "group").write_text(group)
    (etc / "shadow").write_text(shadow)
    os.chmod(etc / "shadow", 0o640)
    sudoers = etc / "sudoers.d"
    shutil.copytree("/etc/sudoers.d", sudoers) if Path("/etc/sudoers.d").is_dir() else sudoers.mkdir()
    (sudoers / "k3tb-ubuntu").write_text(UBUNTU_SUDOERS)
    os.chmod(sudoers / "k3tb-ubuntu", 0o440)


def _write_hosts(etc: Path, name: str, address: str) -> None:
    """/etc/hostname and /etc/hosts naming this node (sudo warns when the hostname won't resolve)."""
    (etc / "hostname").write_text(name + "\n")
    hosts = Path("/etc/hosts").read_text() if Path("/etc/hosts").exists() else "127.0.0.1 localhost\n"
    (etc / "hosts").write_text(hosts.rstrip("\n") + f"\n{address} {name}\n")


def _without_user(text: str, user: str) -> str:
    return "".join(line + "\n" for line in text.splitlines() if line and line.split(":")[0] != user)


def _unlocked(line: str) -> str:
    fields = line.split(":")
    if fields[0] == "root" and fields[1].startswith("!"):
        fields[1] = "*"
    return ":".join(fields)


def _write_identity(ndir: Path) -> None:
    (ndir / "etc" / "machine-id").write_text(uuid.uuid4().hex + "\n")
    (ndir / "boot_id").write_text(str(uuid.uuid4()) + "\n")
    os.chmod(ndir / "etc" / "machine-id", 0o444)
    os.chmod(ndir / "boot_id", 0o444)


def _write_homes(ndir: Path, uid: int, gid: int) -> None:
    (ndir / "root-home").mkdir(mode=0o700)
    ubuntu_home = ndir / "home" / "ubuntu"
    ubuntu_home.mkdir(parents=True)
    os.chmod(ndir / "home", 0o755)
    os.chown(ubuntu_home, uid, gid)
    os.chmod(ubuntu_home, 0o755)
    (ndir / "tmp").mkdir()
    os.chmod(ndir / "tmp", 0o1777)


def _write_docker_config(ndir: Path, spec: NodeSpec) -> None:
    (ndir / "etc-docker").mkdir(mode=0o755)
    (ndir / "var-lib-docker").mkdir(mode=0o710)
    (ndir / "var-lib-containerd").mkdir(mode=0o711)
    (ndir / "etc-containerd").mkdir(mode=0o755)
    (ndir / "etc-containerd" / "config.toml").write_text(CONTAINERD_TOML)
    # containerd.io's containerd runs on every docker-ce host; dockerd only checks that its
    # socket exists (os.Lstat), so an empty file stands for it.
    (ndir / "run-containerd").mkdir(mode=0o711)
    (ndir / "run-containerd" / "containerd.sock").touch()
    (ndir / "usr-local-sbin").mkdir(mode=0o755)
    if spec.nvidia_toolkit:
        hook = ndir / "usr-local-sbin" / "nvidia-container-runtime-hook"
        hook.write_text(HOOK_STANDIN)
        hook.chmod(0o755)
    text = _daemon_json(spec)
    if text is not None:
        (ndir / "etc-docker" / "daemon.json").write_text(text)


def _daemon_json(spec: NodeSpec) -> str | None:
    """The node's daemon.json: as given (--node NAME:daemon_json=...), with the nvidia runtime
    entry merged in when the toolkit profile says `nvidia-ctk runtime configure` ran."""
    if not spec.node_json().get("nvidia_runtime_entry"):
        return spec.daemon_json
    try:
        config = json.loads(spec.daemon_json) if spec.daemon_json else {}
    except json.JSONDecodeError:
        return spec.daemon_json   # a deliberately broken file stays broken
    if not isinstance(config, dict):
        return spec.daemon_json
    config["runtimes"] = {**(config.get("runtimes") or {}), **NVIDIA_RUNTIME}
    return json.dumps(config, indent=4) + "\n"


def _write_ssh(ndir: Path, name: str, address: str) -> None:
    """Per-node /etc/ssh: the host's client config, our sshd_config and a host key kept forever."""
    ssh = ndir / "etc-ssh"
    ssh.mkdir(exist_ok=True)
    for item in ("ssh_config", "ssh_config.d", "moduli"):
        src, dst = Path("/etc/ssh") / item, ssh / item
        if src.is_dir() and not dst.exists():
            shutil.copytree(src, dst)
        elif src.is_file():
            shutil.copy2(src, dst)
    key = ssh / "ssh_host_ed25519_key"
    if not key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"k3tb-{name}",
                        "-f", str(key)], check=True, capture_output=True)
    (ssh / "sshd_config").write_text(sshd_config(address))


def sshd_config(address: str) -> str:
    return "\n".join([
        f"ListenAddress {address}:22",
        "HostKey /etc/ssh/ssh_host_ed25519_key",
        "PidFile none",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "AuthorizedKeysFile /run/k3tb/authorized_keys",
        "StrictModes no",
        "UsePAM no",
        "PermitRootLogin prohibit-password",
        "PrintMotd no",
        "AcceptEnv LANG LC_*",
        f"SetEnv PATH={NODE_PATH}",
        "Subsystem sftp /usr/lib/openssh/sftp-server",
        "",
    ])


def host_public_key(tb_dir: Path, name: str) -> str:
    """'ssh-ed25519 AAAA...' of the node's host key (for known_hosts)."""
    pub = node_dir(tb_dir, name) / "etc-ssh" / "ssh_host_ed25519_key.pub"
    return " ".join(pub.read_text().split()[:2])


def _write_runtime(ndir: Path, spec: NodeSpec, authorized_key: str) -> None:
    """/run/k3tb: fresh docker state and engine files; the stand-in call log is kept."""
    run = ndir / "run"
    run.mkdir(mode=0o755, exist_ok=True)
    for entry in run.iterdir():
        if entry.name != "calls.jsonl":
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    (run / "node.json").write_text(json.dumps(spec.node_json(), indent=1) + "\n")
    (run / "authorized_keys").write_text(authorized_key)
    os.chmod(run / "authorized_keys", 0o644)
    (run / "docker").mkdir(mode=0o755)
    (run / "calls.jsonl").touch()
    os.chmod(run / "calls.jsonl", 0o666)  # stand-ins run as any user and append here

"""Start, stop and probe simulated nodes.

A node's init is `ip netns exec k3tb<idx>-<name> unshare --mount --propagation private --uts
--pid --fork --mount-proc sh -c SCRIPT`: the script configures eth0, bind-mounts the node's host
directories over the real paths (private propagation: the host never sees them) and execs
sshd as the node's PID 1. Its own PID namespace means `ps`/`pkill` on a node see only that
node, and when sshd dies the kernel kills everything else in the node. Its own UTS namespace
gives it its name as hostname (resolvable through its own /etc/hosts). The recorded init pid
is the `unshare` parent (host PID namespace), which lives as long as the node.
"""
from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tb import hubtls, net
from tb.nodefs import ROUTER_SITE_MOUNT, SHARED_HF_MOUNT, node_dir, shared_hf_dir
from tb.nodespec import NodeSpec
from tb.sshcmd import login_until, ssh_argv
from tb.state import process_start_time, same_process

BINDS = (  # (host path relative to the node dir, path inside the node)
    ("etc-docker", "/etc/docker"), ("var-lib-docker", "/var/lib/docker"), ("run", "/run/k3tb"),
    ("etc-containerd", "/etc/containerd"), ("var-lib-containerd", "/var/lib/containerd"),
    ("usr-local-sbin", "/usr/local/sbin"), ("run-containerd", "/run/containerd"),
    ("root-home", "/root"), ("home", "/home"), ("etc-ssh", "/etc/ssh"),
    ("etc/passwd", "/etc/passwd"), ("etc/group", "/etc/group"), ("etc/shadow", "/etc/shadow"),
    ("etc/sudoers.d", "/etc/sudoers.d"), ("etc/machine-id", "/etc/machine-id"),
    ("etc/hosts", "/etc/hosts"), ("etc/hostname", "/etc/hostname"),
    ("boot_id", "/proc/sys/kernel/random/boot_id"),
)


class NodeError(RuntimeError):
    pass


def init_script(ndir: Path, standins: Path, spec: NodeSpec, address: str) -> str:
    q = shlex.quote
    lines = ["set -e",
             "ip link set lo up",
             "echo 1 > /proc/sys/net/ipv6/conf/eth0/disable_ipv6",
             f"echo {q(spec.name)} > /proc/sys/kernel/hostname",
             f"ip addr add {address}/24 dev eth0",
             "ip link set eth0 up",
             *_second_nic(spec),
             *([] if symlinked(spec) else [nvme_mount(spec, "/mnt/nvme")]),
             *shared_hf_mount(ndir.parent.parent, spec),
             f"mount --bind {q(str(standins))} /usr/local/bin",
             "mount -o remount,bind,ro /usr/local/bin",
             *router_site_mount(standins)]
    lines += [f"mount --bind {q(str(ndir / src))} {dst}" for src, dst in BINDS]
    lines += fabric_mounts(ndir, spec)
    trust = hubtls.trust_bundle(ndir.parent.parent)
    if trust is not None:
        lines.append(f"mount --bind {q(str(trust))} {hubtls.SYSTEM_BUNDLE}")
    # /tmp last: the testbed dir itself may live under /tmp and is needed until here.
    lines += [f"mount --bind {q(str(ndir / 'tmp'))} /tmp"]
    lines += symlinked_nvme(spec) if symlinked(spec) else []
    lines += ["cd /",
              "exec /usr/sbin/sshd -D -e -f /etc/ssh/sshd_config"]
    return "\n".join(lines) + "\n"


def router_site_mount(standins: Path) -> list[str]:
    """The site-packages holding smg (standins.py wrote where) at ROUTER_SITE_MOUNT, read-only;
    nothing when the laptop's venv has no smg."""
    site_file = standins / "engine" / "router_site"
    site = site_file.read_text().strip() if site_file.exists() else ""
    if not site or not Path(site, "smg").is_dir():
        return []
    q = shlex.quote
    return [f"mount --bind {q(site)} {ROUTER_SITE_MOUNT}",
            f"mount -o remount,bind,ro {ROUTER_SITE_MOUNT}"]


# nvme-symlinked: the NVMe filesystem mounted elsewhere and /mnt/nvme a symlink to it, as on
# hosts whose provider mounts the disk at its own path (the inventory names the symlink).
# /mnt gets a tmpfs of its own inside the node (private mount namespace) so the symlink never
# touches the host's /mnt; done last, after every bind whose source could live under /mnt.
NVME_TARGET = "/mnt/disks/nvme0n1"


def symlinked(spec: NodeSpec) -> bool:
    return bool(spec.node_json().get("nvme_symlinked"))


def nvme_mount(spec: NodeSpec, where: str) -> str:
    return f"mount -t tmpfs -o size={shlex.quote(spec.disk)},mode=0755 nvme {where}"


def symlinked_nvme(spec: NodeSpec) -> list[str]:
    return ["mount -t tmpfs -o size=1M,mode=0755 mnt /mnt",
            f"mkdir -p {NVME_TARGET}",
            nvme_mount(spec, NVME_TARGET),
            f"ln -s {NVME_TARGET} /mnt/nvme"]


def shared_hf_mount(tb_dir: Path, spec: NodeSpec) -> list[str]:
    """On a --shared-hf testbed every node has a directory of its own at the shared path (a
    tmpfs: never the host's /mnt); with shared_hf the testbed's one host directory is bound over
    it, so a node without it is what a machine whose volume did not mount looks like: an empty
    local directory."""
    if spec.shared_hf is None:
        return []   # no mount a discovery (`k3deploy init`) could take for the NVMe
    lines = [f"mount -t tmpfs -o size={shlex.quote(spec.disk)},mode=0755 k3tb-local "
             f"{SHARED_HF_MOUNT}"]
    if spec.shared_hf:
        lines.append(f"mount --bind {shlex.quote(str(shared_hf_dir(tb_dir)))} {SHARED_HF_MOUNT}")
    return lines


def fabric_mounts(ndir: Path, spec: NodeSpec) -> list[str]:
    """Profile ib-hcas: overlays (upper dirs in DIR/nodes/<n>/fabric) over /sys/class,
    /sys/module and /dev of this node's mount namespace only, holding the HCAs' sysfs files,
    the nvidia_peermem module dir and the verbs character devices as the kernel makes them.
    /dev/pts and /dev/shm are moved back on top of the /dev overlay. Everything goes with the
    node's mount namespace (testbed down, kill-node)."""
    node = spec.node_json()
    count = int(node.get("ib_hcas") or 0)
    if not count:
        return []
    q, f = shlex.quote, ndir / "fabric"
    out = [f"mkdir -p {q(str(f))}"]
    for name, where in (("sys", "/sys/class"), ("mod", "/sys/module")):
        up, wk = q(str(f / f"{name}-up")), q(str(f / f"{name}-wk"))
        out += [f"rm -rf {up} {wk}", f"mkdir -p {up} {wk}",
                f"mount -t overlay k3tb-{name} -o lowerdir={where},upperdir={up},workdir={wk} {where}"]
    # [device, state, rate, link layer] per port: the profile's, else `count` NDR HCAs
    layout = node.get("ib_port_layout") or [
        [f"mlx5_{i}", "4: ACTIVE", node.get("ib_rate", "400 Gb/sec (4X NDR)"), "InfiniBand"]
        for i in range(count)]
    for name, state, rate, layer in layout:
        port = f"/sys/class/infiniband/{name}/ports/1"
        out += [f"mkdir -p {q(port)}", f"echo {q(state)} > {q(port)}/state",
                f"echo {q(rate)} > {q(port)}/rate", f"echo {q(layer)} > {q(port)}/link_layer"]
    if node.get("nvidia_peermem"):
        out.append("mkdir -p /sys/module/nvidia_peermem")
    up, wk = q(str(f / "dev-up")), q(str(f / "dev-wk"))
    keep = {d: q(str(f / f"keep-{d}")) for d in ("pts", "shm")}
    out += [f"rm -rf {up} {wk}", f"mkdir -p {up} {wk} {keep['pts']} {keep['shm']}",
            *(f"mount --rbind /dev/{d} {k}" for d, k in keep.items()),
            f"mount -t overlay k3tb-dev -o lowerdir=/dev,upperdir={up},workdir={wk} /dev",
            *(f"mount --move {k} /dev/{d}" for d, k in keep.items()),
            "mkdir -p /dev/infiniband", "mknod /dev/infiniband/rdma_cm c 10 58"]
    for i in range(count):
        out += [f"mknod /dev/infiniband/uverbs{i} c 231 {192 + i}",
                f"mknod /dev/infiniband/umad{i} c 231 {i}"]
    return out


def _second_nic(spec: NodeSpec) -> list[str]:
    """eth1 as a veth whose other end stays in the node's own namespace: an interface with an
    address on a subnet no other node has, and no way for its traffic to leave the node."""
    if not spec.second_nic:
        return []
    return ["ip link add eth1 type veth peer name eth1peer",
            "echo 1 > /proc/sys/net/ipv6/conf/eth1/disable_ipv6",
            "echo 1 > /proc/sys/net/ipv6/conf/eth1peer/disable_ipv6",
            f"ip addr add {shlex.quote(spec.second_nic)} dev eth1",
            "ip link set eth1peer up", "ip link set eth1 up"]


def start_init(tb_dir: Path, spec: NodeSpec, ns: str, address: str) -> tuple[int, int]:
    """Start the node's init; returns (pid, start time) for the record."""
    ndir = node_dir(tb_dir, spec.name)
    script = init_script(ndir, Path(tb_dir) / "standins", spec, address)
    with open(ndir / "init.log", "ab") as log:
        proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, "unshare", "--mount", "--propagation", "private",
             "--uts", "--pid", "--fork", "--mount-proc", "sh", "-c", script],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd="/", start_new_session=True)
    return proc.pid, process_start_time(proc.pid)


def init_alive(record: dict) -> bool:
    return same_process(record.get("init_pid"), record.get("init_start"))


def log_tail(tb_dir: Path, name: str, lines: int = 15) -> str:
    path = node_dir(tb_dir, name) / "init.log"
    text = path.read_text(errors="replace") if path.exists() else "(no init.log)"
    return "\n".join(text.splitlines()[-lines:])


def kill_processes(records: list[dict]) -> None:
    """SIGKILL every process in these nodes' network or mount namespaces, until none is left."""
    for _ in range(100):
        pids = _node_pids(records)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    raise NodeError(f"processes survive SIGKILL: {sorted(_node_pids(records))}")


def node_pids(records: list[dict]) -> set[int]:
    """Every process of these nodes (init and whatever runs in their namespaces)."""
    return _node_pids(records)


def _node_pids(records: list[dict]) -> set[int]:
    net_inodes, mnt_inodes, pids = set(), set(), set()
    for record in records:
        inode = net.netns_inode(record["netns"])
        if inode is not None:
            net_inodes.add(inode)
        if init_alive(record):  # a stored pid is trusted only while its start time matches
            pids.add(record["init_pid"])
            mnt = net.ns_inode_of(record["init_pid"], "mnt")
            if mnt is not None:
                mnt_inodes.add(mnt)
    return pids | net.pids_in_namespaces(net_inodes, mnt_inodes)


def wait_for_ssh(tb_dir: Path, records: list[dict], timeout: float) -> None:
    """Return when every node accepts an SSH login with the testbed key; raise naming the
    nodes that did not, with the tail of their init log."""
    deadline = time.monotonic() + timeout
    with ThreadPoolExecutor(max_workers=min(16, len(records) or 1)) as pool:
        results = list(pool.map(lambda r: _wait_one(tb_dir, r, deadline), records))
    failed = [(record, err) for record, err in zip(records, results) if err]
    if failed:
        raise NodeError("nodes not accepting SSH:\n" + "\n".join(
            f"--- {r['name']} ({r['address']}): {err}\n{log_tail(tb_dir, r['name'])}"
            for r, err in failed))


def _wait_one(tb_dir: Path, record: dict, deadline: float) -> str | None:
    argv = ssh_argv(tb_dir, record["user"], record["address"], "true", connect_timeout=3)
    return login_until(argv, deadline, gone=lambda: not init_alive(record))

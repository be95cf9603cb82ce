"""Bridge, network namespaces, veths and the few iptables rules of a testbed.

Layout (docs/architecture.md): bridge `k3tb<idx>` = 10.213.<idx>.1/24 in the root namespace;
node i lives in netns `k3tb<idx>-<name>` behind a veth whose host end is `k3tb<idx>v<i>` and
whose node end is `eth0` = 10.213.<idx>.<10+i>/24. No NAT, no default route in the nodes
(`up --ssh-gateway` adds a forwarding namespace at 10.213.<idx>.2 whose NAT is its own: tb/gateway.py).
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

MAX_IDX = 250
NETNS_DIR = Path("/run/netns")
# Each node's link, both ways: a NIC, scaled down as the mock Hub's rates are. Uncapped, a veth
# moves what this machine's memory copies allow, so the fabric mesh (which pushes as fast as a
# link takes for its rounds) would measure, and burn, the machine's cores instead of a link.
LINK_MBIT = 1000


class NetError(RuntimeError):
    pass


def bridge_name(idx: int) -> str:
    return f"k3tb{idx}"


def bridge_address(idx: int) -> str:
    return f"10.213.{idx}.1"


def node_address(idx: int, index: int) -> str:
    return f"10.213.{idx}.{10 + index}"


def netns_name(idx: int, node: str) -> str:
    return f"k3tb{idx}-{node}"


def host_veth(idx: int, index: int) -> str:
    return f"k3tb{idx}v{index}"


# `up --ssh-gateway` (tb/gateway.py): one more namespace on the bridge, at .2 (nodes start at .10)
def gateway_netns(idx: int) -> str:
    return f"k3tb{idx}-gateway"   # node names are node<N>: never this


def gateway_veth(idx: int) -> str:
    return f"k3tb{idx}gw"


def gateway_address(idx: int) -> str:
    return f"10.213.{idx}.2"


def run(argv: list[str], check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, input=stdin, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise NetError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def claim_bridge(before_create, owner: str) -> int:
    """Create the bridge of the first free idx and return idx; its alias is `owner` (the
    testbed's directory), so a check for what one testbed left knows an idx another has
    claimed since.

    `ip link add` fails if the name exists, so two testbeds starting at once never share an idx.
    before_create(idx) runs first so the bridge is recorded before it exists."""
    for idx in range(MAX_IDX + 1):
        if link_exists(bridge_name(idx)) or _subnet_in_use(idx):
            continue
        before_create(idx)
        if run(["ip", "link", "add", bridge_name(idx), "type", "bridge"], check=False).returncode == 0:
            run(["ip", "link", "set", "dev", bridge_name(idx), "alias", owner])
            _configure_bridge(idx)
            return idx
    raise NetError("no free testbed index: bridges k3tb0..k3tb250 all exist")


def _subnet_in_use(idx: int) -> bool:
    routes = run(["ip", "-4", "route", "show", "root", f"10.213.{idx}.0/24"], check=False).stdout
    return bool(routes.strip())


def _configure_bridge(idx: int) -> None:
    br = bridge_name(idx)
    # No IPv6 on the bridge: nodes talk IPv4 only, and nothing should autoconfigure here.
    Path(f"/proc/sys/net/ipv6/conf/{br}/disable_ipv6").write_text("1\n")
    run(["ip", "addr", "add", f"{bridge_address(idx)}/24", "dev", br])
    run(["ip", "link", "set", br, "up"])


# The kernel's ARP table is shared by every network namespace: 32 fully meshed nodes need
# ~32 x 32 entries, past the default gc_thresh3 (1024), and then new neighbours are refused
# ("neighbor table overflow") and connections time out. Raised (never lowered) for the testbed.
NEIGH_THRESHOLDS = {"gc_thresh1": 4096, "gc_thresh2": 8192, "gc_thresh3": 16384}


def raise_neighbour_limits() -> None:
    for key, wanted in NEIGH_THRESHOLDS.items():
        path = f"/proc/sys/net/ipv4/neigh/default/{key}"
        with open(path) as fh:
            current = int(fh.read())
        if current < wanted:
            with open(path, "w") as fh:
                fh.write(str(wanted))


def delete_link(name: str) -> None:
    if link_exists(name):
        run(["ip", "link", "del", name], check=False)


def netns_exists(name: str) -> bool:
    return (NETNS_DIR / name).exists()


def create_node_links(idx: int, nodes: list[tuple[str, int]]) -> None:
    """Namespaces and veths for (name, index) pairs, in one `ip -batch` (fast for 32 nodes)."""
    lines = []
    for name, index in nodes:
        ns, veth = netns_name(idx, name), host_veth(idx, index)
        lines += [f"netns add {ns}",
                  f"link add {veth} type veth peer name eth0 netns {ns}",
                  f"link set {veth} master {bridge_name(idx)} up"]
    run(["ip", "-batch", "-"], stdin="\n".join(lines) + "\n")
    shape_links([(netns_name(idx, name), host_veth(idx, index)) for name, index in nodes],
                LINK_MBIT)


def delete_netns(names: list[str]) -> None:
    present = [n for n in names if netns_exists(n)]
    if present:
        run(["ip", "-force", "-batch", "-"], check=False,
            stdin="".join(f"netns del {n}\n" for n in present))


def forget_neighbor(idx: int, address: str) -> None:
    """Drop the bridge's ARP entry so a dead node fails fast (EHOSTUNREACH) instead of
    sending to a stale MAC until the entry ages out."""
    run(["ip", "neigh", "flush", "to", address, "dev", bridge_name(idx)], check=False)
    if netns_exists(gateway_netns(idx)):   # the gateway forwards to the node's address too
        run(["ip", "-n", gateway_netns(idx), "neigh", "flush", "to", address], check=False)


def netns_inode(name: str) -> int | None:
    try:
        return os.stat(NETNS_DIR / name).st_ino
    except FileNotFoundError:
        return None


def pids_in_namespaces(net_inodes: set[int], mnt_inodes: set[int]) -> set[int]:
    """Every pid whose network or mount namespace is one of the given ones (one /proc scan)."""
    found = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        if _ns_inode(entry.name, "net") in net_inodes or _ns_inode(entry.name, "mnt") in mnt_inodes:
            found.add(int(entry.name))
    found.discard(os.getpid())
    return found


def _ns_inode(pid: str, kind: str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/{kind}").st_ino
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None


def ns_inode_of(pid: int, kind: str) -> int | None:
    return _ns_inode(str(pid), kind)


# --- iptables: accept the testbed's own traffic whatever the host's policies are -------------

def accept_rules(idx: int) -> list[list[str]]:
    br = bridge_name(idx)
    tag = ["-m", "comment", "--comment", f"k3tb{idx}"]
    return [["INPUT", "-i", br, *tag, "-j", "ACCEPT"],
            ["OUTPUT", "-o", br, *tag, "-j", "ACCEPT"],
            ["FORWARD", "-i", br, "-o", br, *tag, "-j", "ACCEPT"]]


def add_rule(rule: list[str]) -> None:
    run(["iptables", "-w", "-I", *rule])


def delete_rule(rule: list[str]) -> None:
    # -D removes one copy; loop in case a crashed `up` was retried and inserted it twice.
    for _ in range(10):
        if run(["iptables", "-w", "-D", *rule], check=False).returncode != 0:
            return


# --- partition inside the node's own netns: host rules stay untouched ------------------------

def partition(ns: str) -> None:
    heal(ns)
    ipt = ["ip", "netns", "exec", ns, "iptables", "-w"]
    run([*ipt, "-I", "INPUT", "!", "-i", "lo", "-j", "DROP"])
    run([*ipt, "-I", "OUTPUT", "!", "-o", "lo", "-j", "DROP"])


def firewall(ns: str) -> None:
    """A cloud security group that lets only SSH in: new inbound TCP connections to any
    other port are dropped (replies to the node's own connections still pass)."""
    heal(ns)
    ipt = ["ip", "netns", "exec", ns, "iptables", "-w"]
    run([*ipt, "-A", "INPUT", "!", "-i", "lo", "-p", "tcp", "--dport", "22", "-j", "ACCEPT"])
    run([*ipt, "-A", "INPUT", "!", "-i", "lo", "-p", "tcp", "--syn", "-j", "DROP"])


def heal(ns: str) -> None:
    ipt = ["ip", "netns", "exec", ns, "iptables", "-w"]
    run([*ipt, "-F", "INPUT"])
    run([*ipt, "-F", "OUTPUT"])


def slow_link(ns: str, host_veth_name: str, mbit: int) -> None:
    """The node's link at `mbit` both ways (0: LINK_MBIT again): a token bucket on what its
    eth0 sends and one on what the host end of its veth sends it. The veth pair, and the
    buckets with it, go when the node's namespace does."""
    shape_links([(ns, host_veth_name)], mbit or LINK_MBIT)


def shape_links(links: list[tuple[str, str]], mbit: int) -> None:
    """(netns, host veth) pairs at `mbit` each way: the host ends in one `tc -batch`."""
    tbf = _tbf(mbit)
    run(["tc", "-batch", "-"], stdin="".join(f"qdisc replace dev {veth} root {tbf}\n"
                                             for _, veth in links))
    for ns, _ in links:
        run(["tc", "-netns", ns, "qdisc", "replace", "dev", "eth0", "root", *tbf.split()])


def _tbf(mbit: int) -> str:
    burst = f"{max(mbit * 1000 // 8 // 100, 64)}kb"   # ~10 ms of traffic
    return f"tbf rate {mbit}mbit burst {burst} latency 50ms"

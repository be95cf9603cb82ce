"""`up --ssh-gateway`: every node's SSH behind one address, a port per node, as some providers
hand out their machines (`ssh -p 40123 root@gw...`, k3deploy issue 53 item 4).

The gateway is a namespace of its own (net.gateway_netns) on the testbed's bridge at
net.gateway_address; it forwards its port PORT_BASE + i to node i's port 22. DNAT sends the
connection on; SNAT to the gateway's own address brings the node's answer back through it (the
host and the nodes share the bridge: without it a node would answer the host directly and the
host, which spoke to the gateway, would reset). So a node sees its SSH clients coming from the
gateway, as behind a provider's. Everything else (the Hub, the peers, the engine's ports) stays
on the nodes' own addresses, the private addresses of the inventory. The rules live inside the
namespace and go with it."""
from __future__ import annotations

import time
from pathlib import Path

from tb import net
from tb.sshcmd import login_until, ssh_argv

PORT_BASE = 40100


def port_of(index: int) -> int:
    return PORT_BASE + index


def record(idx: int, nodes: list[dict]) -> dict:
    """What `down` needs to undo it and what the inventory and known_hosts say: recorded before
    anything is made (tb/state.py)."""
    return {"netns": net.gateway_netns(idx), "veth": net.gateway_veth(idx),
            "address": net.gateway_address(idx),
            "ports": {r["name"]: port_of(r["index"]) for r in nodes}}


def create(idx: int, gateway: dict, nodes: list[dict]) -> None:
    ns, veth = gateway["netns"], gateway["veth"]
    net.run(["ip", "-batch", "-"], stdin=f"netns add {ns}\n"
            f"link add {veth} type veth peer name eth0 netns {ns}\n"
            f"link set {veth} master {net.bridge_name(idx)} up\n")
    net.run(["ip", "-n", ns, "addr", "add", f"{gateway['address']}/24", "dev", "eth0"])
    net.run(["ip", "-n", ns, "link", "set", "eth0", "up"])
    net.run(["ip", "-n", ns, "link", "set", "lo", "up"])
    # Forwarding in and out of eth0: no ICMP redirects telling the host to skip the gateway.
    net.run(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_forward=1",
             "net.ipv4.conf.all.send_redirects=0", "net.ipv4.conf.eth0.send_redirects=0"])
    net.run(["ip", "netns", "exec", ns, "iptables-restore"], stdin=_rules(gateway, nodes))


def _rules(gateway: dict, nodes: list[dict]) -> str:
    dnat = [f"-A PREROUTING -i eth0 -d {gateway['address']}/32 -p tcp --dport "
            f"{gateway['ports'][r['name']]} -j DNAT --to-destination {r['address']}:22"
            for r in nodes]
    snat = f"-A POSTROUTING -o eth0 -m conntrack --ctstate DNAT -j SNAT --to-source {gateway['address']}"
    return "\n".join(["*nat", *dnat, snat, "COMMIT", ""])


def wait_for_ssh(tb_dir: Path, gateway: dict, nodes: list[dict], timeout: float) -> None:
    """Return when every node takes a login through the gateway, with OpenSSH checking the
    `[address]:port` known_hosts line the testbed wrote; raise naming those that did not."""
    deadline = time.monotonic() + timeout
    failed = {}
    for r in nodes:
        port = gateway["ports"][r["name"]]
        argv = ssh_argv(tb_dir, r["user"], gateway["address"], "true", connect_timeout=3, port=port)
        failed[r["name"]] = login_until(argv, deadline)
    said = [f"{name} ({gateway['address']} port {gateway['ports'][name]}): {err}"
            for name, err in failed.items() if err]
    if said:
        raise net.NetError("nodes not accepting SSH through the gateway:\n" + "\n".join(said))


def known_hosts_lines(gateway: dict, host_keys: dict[str, str]) -> list[str]:
    """host_keys: node name -> 'ssh-ed25519 AAAA...'. The name form is OpenSSH's for a port
    other than 22 (sshd(8) SSH_KNOWN_HOSTS FILE FORMAT; openssh-portable misc.c put_host_port)."""
    return [f"[{gateway['address']}]:{port} {host_keys[name]}\n"
            for name, port in gateway["ports"].items()]


def remove(gateway: dict | None) -> None:
    if gateway:
        net.delete_netns([gateway["netns"]])
        net.delete_link(gateway["veth"])   # gone with the namespace; a half-made one may not be

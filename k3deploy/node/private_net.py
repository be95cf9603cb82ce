"""Which address and NIC each node's engine should use for the cluster's own traffic
(`private_address`, `nic`: SGLANG_HOST_IP, NCCL/GLOO_SOCKET_IFNAME): a private-range IPv4
address on a subnet every node has an address in. Wrong IP or NIC on multi-homed hosts is the
mistake multi-node engine users report most (vLLM #7815, #12670, #13521), so every choice
among several candidates comes with its reason. Pure: the addresses come from host_facts."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass

from k3deploy.core.errors import BadInputError
from k3deploy.node.host_facts import Address, Route

# RFC 1918. 100.64/10 (RFC 6598, carrier-grade NAT) is shared with the provider, not ours.
PRIVATE_NETS = tuple(ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12",
                                                       "192.168.0.0/16"))


@dataclass(frozen=True)
class Choice:
    address: str
    nic: str
    network: str


def candidates(addrs: list[Address]) -> list[Address]:
    """A host's private-range IPv4 addresses that other hosts could reach (scope global)."""
    return [a for a in addrs if a.scope == "global"
            and any(ipaddress.ip_address(a.address) in net for net in PRIVATE_NETS)]


def candidates_of(per_host: dict[str, list[Address]]) -> dict[str, list[Address]]:
    return {h: candidates(a) for h, a in per_host.items()}


def shared_networks(per_host: dict[str, list[Address]]) -> list[ipaddress.IPv4Network]:
    """Subnets in which every host has an address, the addresses all different: a bridge
    every host creates alike (docker0's 172.17.0.1 on every node) is no network between them."""
    nets = dict.fromkeys(a.network for addrs in per_host.values() for a in addrs)
    found = []
    for net in nets:
        held = [[a.address for a in addrs if a.network == net] for addrs in per_host.values()]
        firsts = [h[0] for h in held if h]
        if len(firsts) == len(per_host) and len(set(firsts)) == len(firsts):
            found.append(net)
    return found


def _describe(per_host: dict[str, list[Address]]) -> str:
    return "; ".join(f"{h}: {', '.join(map(str, a)) or 'none'}" for h, a in per_host.items())


def pick_network(per_host: dict[str, list[Address]], ssh: dict[str, str],
                 ask: Callable[[list[str]], int] | None) -> tuple[ipaddress.IPv4Network, str]:
    """(network, why). Several shared subnets: the one the SSH addresses are in, else ask
    (ask(options) -> index) or refuse (exit 2) naming every candidate."""
    shared = shared_networks(per_host)
    if not shared:
        raise BadInputError("no private subnet has an address of every host, so the nodes "
                            f"have no common cluster network; private addresses found: "
                            f"{_describe(per_host)}",
                            hint="give the hosts addresses on one private subnet, then re-run")
    if len(shared) == 1:
        return shared[0], _only_reason(shared[0], per_host)
    if all(_is_ip(a) for a in ssh.values()):
        by_ssh = [n for n in shared
                  if all(ipaddress.ip_address(ssh[h]) in n for h in per_host)]
        if len(by_ssh) == 1:
            return by_ssh[0], (f"{by_ssh[0]} of the shared subnets "
                               f"{', '.join(map(str, shared))}: the SSH addresses are in it")
    options = [str(n) for n in shared]
    if ask is None:
        raise BadInputError(f"every host has an address in each of {', '.join(options)}; "
                            f"which one carries the cluster's traffic? {_describe(per_host)}",
                            hint="run init in a terminal to choose, or give the hosts by their "
                                 "address on the cluster network")
    net = shared[ask(options)]
    return net, f"{net} of {', '.join(options)}: chosen at the prompt"


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _only_reason(net: ipaddress.IPv4Network, per_host: dict[str, list[Address]]) -> str:
    others = sorted({str(a.network) for addrs in per_host.values() for a in addrs} - {str(net)})
    if not others:
        return f"{net}: the only private subnet found"
    return (f"{net}: the only private subnet every host has an address in "
            f"({', '.join(others)} {'is' if len(others) == 1 else 'are'} not shared)")


def choose(per_host: dict[str, list[Address]], ssh: dict[str, str],
           ask: Callable[[list[str]], int] | None = None) -> tuple[dict[str, Choice], list[str]]:
    """Every host's address and NIC on the chosen subnet, and notes saying why (one per host
    that had another candidate)."""
    per_host = candidates_of(per_host)
    net, why = pick_network(per_host, ssh, ask)
    chosen, notes = {}, [f"cluster network {why}"]
    for host, addrs in per_host.items():
        on_net = [a for a in addrs if a.network == net]
        chosen[host] = Choice(on_net[0].address, on_net[0].ifname, str(net))
        passed = [a for a in addrs if a != on_net[0]]
        if passed:
            notes.append(f"{host}: {on_net[0]}, not {', '.join(map(str, passed))}: "
                         + _why_not(passed, net))
    return chosen, notes


def _why_not(passed: list[Address], net: ipaddress.IPv4Network) -> str:
    off = sorted({str(a.network) for a in passed if a.network != net})
    if not off:
        return f"the first of its addresses in {net}"
    return f"not every node has an address in {', '.join(off)}"


def route_problems(chosen: dict[str, Choice], routes: dict[str, dict[str, Route | None]]) -> list[str]:
    """routes: host -> peer -> the route the host takes to the peer's chosen address. Traffic
    that would leave by another NIC than the one the engine is told to use is named."""
    problems = []
    for host, per_peer in routes.items():
        for peer, route in per_peer.items():
            want = chosen[host].nic
            if route is None:
                problems.append(f"{host} has no route to {peer}'s {chosen[peer].address}")
            elif route.dev != want:
                problems.append(f"{host} reaches {peer}'s {chosen[peer].address} through "
                                f"{route.dev}, not {want}: check the routing table")
            elif route.src and route.src != chosen[host].address:
                # the peer would see (and NCCL bootstrap answer) another address than ours
                problems.append(f"{host} reaches {peer}'s {chosen[peer].address} from "
                                f"{route.src}, not {chosen[host].address}: check the routing table")
    return problems

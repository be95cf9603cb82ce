"""What `k3deploy init` reads from a host nobody has configured yet: its IPv4 addresses, the
route it takes to an address, its mounted filesystems, its name. Read-only commands whose JSON
output (iproute2's `-j`, util-linux findmnt's `-J`) is parsed into small typed records."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from k3deploy.core.jsonvalue import JSON
from k3deploy.facts.lastjson import json_doc
from k3deploy.node import facts as F

ADDR_ARGV = ["ip", "-j", "-4", "addr", "show"]
# -b: sizes in bytes; -l: a flat list (the tree nests children under "children").
MOUNT_ARGV = ["findmnt", "-J", "-b", "-l", "-o", "TARGET,SOURCE,FSTYPE,SIZE,AVAIL"]


@dataclass(frozen=True)
class Address:
    ifname: str
    address: str
    prefixlen: int
    scope: str = "global"

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Interface(f"{self.address}/{self.prefixlen}").network

    def __str__(self) -> str:
        return f"{self.ifname} {self.address}/{self.prefixlen}"


@dataclass(frozen=True)
class Route:
    dev: str
    src: str | None


@dataclass(frozen=True)
class Mount:
    target: str
    source: str
    fstype: str
    size: int
    avail: int


def parse_addresses(out: str, code: int) -> list[Address] | None:
    """`ip -j -4 addr show`: one record per interface, its IPv4 addresses in addr_info."""
    doc = json_doc(out, code)
    if not isinstance(doc, list):
        return None
    return [Address(link["ifname"], info["local"], int(info["prefixlen"]),
                    info.get("scope", "global"))
            for link in doc for info in link.get("addr_info", [])
            if info.get("family") == "inet" and "local" in info]


def parse_route(out: str, code: int) -> Route | None:
    """`ip -j route get ADDR`: the one route the kernel would use (dev, preferred source)."""
    doc = json_doc(out, code)
    if not doc or not isinstance(doc, list):
        return None
    return Route(doc[0].get("dev", ""), doc[0].get("prefsrc"))


def _bytes(value: JSON) -> int:
    # util-linux prints numbers for -b in JSON since 2.33; older ones print strings
    if not isinstance(value, (str, int, float)):
        return 0
    try:
        return int(value)
    except ValueError:
        return 0


def parse_mounts(out: str, code: int) -> list[Mount] | None:
    doc = json_doc(out, code)
    if not isinstance(doc, dict):
        return None
    return [Mount(fs.get("target") or "", fs.get("source") or "", fs.get("fstype") or "",
                  _bytes(fs.get("size")), _bytes(fs.get("avail")))
            for fs in doc.get("filesystems", [])]


def addresses() -> F.Fact[list[Address] | None]:
    return F.command("addresses", ADDR_ARGV, parse_addresses)


def mounts() -> F.Fact[list[Mount] | None]:
    return F.command("mounts", MOUNT_ARGV, parse_mounts)


def hostname() -> F.Fact[str | None]:
    return F.command("hostname", ["uname", "-n"])


def route_to(name: str, address: str) -> F.Fact[Route | None]:
    """The route to ADDR; `address` is a parsed IPv4 address (ValueError otherwise)."""
    return F.command(name, ["ip", "-j", "route", "get", str(ipaddress.IPv4Address(address))],
                     parse_route)

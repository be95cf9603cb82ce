"""The HOST arguments of `k3deploy init`: an address, or an SSH endpoint with its own port for
hosts behind one gateway (`gw:40100`, or `[gw]:40100` as known_hosts names it; an IPv6 address
with a port only in brackets). Two arguments naming one endpoint are one host given twice."""

from __future__ import annotations

import re
from dataclasses import dataclass

from k3deploy.core.errors import BadInputError

HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.:-]{0,252}$")   # the inventory's Host pattern
_BRACKETED = re.compile(r"^\[(?P<host>[^\]]+)\]:(?P<port>\d+)$")
_NAME_PORT = re.compile(r"^(?P<host>[^:\[\]]+):(?P<port>\d+)$")


@dataclass(frozen=True)
class Target:
    given: str          # as on the command line: how init names the host in what it prints
    host: str
    port: int | None    # None: --port, else ssh(1)'s default


def parse(given: str) -> Target:
    found = _BRACKETED.match(given) or _NAME_PORT.match(given)
    host, port = (found["host"], int(found["port"])) if found else (given, None)
    if not HOST.match(host):
        raise BadInputError(f"not a host name or address: {given}")
    if port is not None and not 1 <= port <= 65535:
        raise BadInputError(f"{given}: port {port} is outside 1..65535")
    return Target(given, host, port)


def targets(hosts: list[str], default_port: int | None) -> dict[str, Target]:
    """given -> Target; refuses what is not a host and endpoints given twice (address, port)."""
    parsed = [parse(h) for h in hosts]
    ends = [(t.host.lower(), t.port or default_port or 22) for t in parsed]
    twice = sorted({t.given for t, end in zip(parsed, ends) if ends.count(end) > 1})
    if twice:
        raise BadInputError(f"hosts given twice (one SSH endpoint): {', '.join(twice)}",
                            hint="hosts behind one gateway: give each its port, GATEWAY:PORT")
    return {t.given: t for t in parsed}

"""k3deploy init HOST...: log in to each host (the host-key rules of every other command), read
its addresses, GPUs, driver and filesystems with read-only facts (two round trips: what it
has, then the route to each peer's chosen address), and write an inventory for them.
Exit 0 written; 1 a host could not be reached or the hosts disagree (written anyway, the
problems named in it); 2 bad input (arguments, an output file that exists, no common subnet,
several and no terminal to ask at)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from k3deploy.cli import init_findings, init_hosts, init_inventory
from k3deploy.cli.init_inventory import Access
from k3deploy.core import group
from k3deploy.core.errors import EXIT_OK, EXIT_STEP_FAILED, BadInputError, K3Error, NodeError
from k3deploy.node import facts as F
from k3deploy.node import host_facts, private_net
from k3deploy.node.ssh_types import Endpoint
from k3deploy.node.transport import NodeConnection
from k3deploy.steps import probes

NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,40}$")             # the inventory's Name pattern


@dataclass(frozen=True)
class InitArgs:
    hosts: list[str]
    out: str
    user: str | None
    key: str | None
    port: int | None
    known_hosts: str | None
    accept_new_host_keys: bool
    hub_endpoint: str | None
    cluster: str | None
    force: bool


def first_facts() -> list[F.Fact[object]]:
    return [host_facts.addresses(), host_facts.mounts(), host_facts.hostname(),
            probes.gpus(), probes.cuda(), probes.driver(),
            F.native("user", "login_user", [], F.text)]


def _check_args(a: InitArgs) -> dict[str, init_hosts.Target]:
    targets = init_hosts.targets(a.hosts, a.port)
    if a.key and not os.path.isfile(a.key):
        raise BadInputError(f"--key {a.key}: no such file")
    if not os.path.isdir(os.path.dirname(os.path.abspath(a.out))):
        raise BadInputError(f"-o {a.out}: no directory {os.path.dirname(os.path.abspath(a.out))}")
    if os.path.exists(a.out) and not a.force:
        raise BadInputError(f"{a.out} exists; init does not overwrite an inventory",
                            hint="name another file with -o, or pass --force")
    if a.hub_endpoint and not re.match(r"^https?://[^\s]+$", a.hub_endpoint):
        raise BadInputError(f"--hub-endpoint {a.hub_endpoint}: not an http(s) URL")
    return targets


def _connections(a: InitArgs, targets: dict[str, init_hosts.Target],
                 known: str) -> dict[str, NodeConnection]:
    return {h: NodeConnection(Endpoint(name=h, host=t.host, user=a.user, port=t.port or a.port,
                                       key=a.key, known_hosts=known, connect_timeout=10,
                                       command_timeout=120),
                              accept_new_host_keys=a.accept_new_host_keys)
            for h, t in targets.items()}


def _gather_all(conns: dict[str, NodeConnection],
                facts_of: Callable[[str], Sequence[F.Fact[object]]]) -> dict[str, F.Found]:
    """facts_of(host) -> facts, gathered on every host at once; a host that fails is named
    with the others (exit 1), none is left out silently."""
    found = group.run_each(lambda host: F.gather(conns[host], facts_of(host)), conns)
    unexpected = [e for e in found.failed.values() if not isinstance(e, K3Error)]
    if unexpected:
        raise unexpected[0]
    failed = found.failed
    if failed:
        raise NodeError(", ".join(failed), "; ".join(f"{h}: {e}" for h, e in failed.items()),
                        hint="init needs every host: bring it back or leave it out")
    return found.unwrapped()


def _names(found: dict[str, F.Found]) -> dict[str, str]:
    """The hosts' own names when they are valid and distinct, else node0..N-1."""
    names = {h: (init_findings.text(f.get("hostname")) or "").lower().split(".")[0]
             for h, f in found.items()}
    if all(NAME.match(n) for n in names.values()) and len(set(names.values())) == len(names):
        return names
    return {h: f"node{i}" for i, h in enumerate(found)}


def _ask(options: list[str]) -> int:
    import typer
    print("every host has an address in each of these subnets:", file=sys.stderr)
    for i, net in enumerate(options, 1):
        print(f"  {i}) {net}", file=sys.stderr)
    choice = typer.prompt("which one carries the cluster's traffic", type=int)
    if not isinstance(choice, int) or not 1 <= choice <= len(options):   # type=int: always one
        raise BadInputError(f"no choice {choice}")
    return choice - 1


def run_init(a: InitArgs, argv: list[str]) -> int:
    targets = _check_args(a)
    known = a.known_hosts or os.path.expanduser("~/.ssh/known_hosts")
    conns = _connections(a, targets, known)
    try:
        found = _gather_all(conns, lambda _h: first_facts())
        names = _names(found)
        chosen, notes = private_net.choose({names[h]: init_findings.items(found[h]["addresses"],
                                                                          host_facts.Address)
                                            for h in a.hosts},
                                           {names[h]: targets[h].host for h in a.hosts},
                                           _ask if sys.stdin.isatty() else None)
        routes = _gather_all(conns, lambda h: [
            host_facts.route_to(names[p], chosen[names[p]].address) for p in a.hosts if p != h])
    finally:
        for conn in conns.values():
            conn.close()
    hosts = [init_findings.host_from(targets[h].host, names[h], found[h], targets[h].port)
             for h in a.hosts]
    problems = init_findings.problems(hosts) + private_net.route_problems(
        chosen, {names[h]: {peer: r if isinstance(r, host_facts.Route) else None
                            for peer, r in routes[h].items()} for h in a.hosts})
    return _write(a, argv, hosts, chosen, notes, problems)


def _write(a: InitArgs, argv: list[str], hosts: list[init_findings.Host],
           chosen: dict[str, private_net.Choice], notes: list[str], problems: list[str]) -> int:
    head = hosts[0]
    if head.gpu is None:
        raise NodeError(head.name, "; ".join(problems) or "no GPU found",
                        hint="init sizes the cluster by the first host's GPUs")
    config = init_inventory.pick_config(head.gpu, len(hosts), head.gpu_count)
    out = Path(a.out)
    access = Access(a.port, a.key, a.known_hosts, a.hub_endpoint or os.environ.get("HF_ENDPOINT"))
    doc = init_inventory.inventory(config, hosts, chosen, access, out.resolve().parent, a.cluster)
    text = init_inventory.render(doc, init_inventory.header(config, hosts, notes, problems, argv))
    out.write_text(text)
    for line in notes:
        print(line)
    for line in problems:
        print(f"problem: {line}", file=sys.stderr)
    print(f"wrote {out} ({config.label}, {config.precision}, {config.engine}, {len(hosts)} "
          f"nodes); next: k3deploy check -i {out}")
    return EXIT_STEP_FAILED if problems else EXIT_OK

"""scripts/testbed up|down|fault|stats (surface: ../shared/design.md, "The testbed")."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from tb import faults, profiles, stats, testbed
from tb.hubcdn import parse_conn_rates
from tb.inventory import ENGINES
from tb.nodespec import DRIVERS, GPUS, SpecError, build_specs

EXIT_FAILED, EXIT_USAGE = 1, 2


def _up_parser(sub) -> None:
    up = sub.add_parser("up", help="start the nodes and the mock Hub; returns when SSH works")
    up.add_argument("--dir", required=True, type=Path)
    up.add_argument("--nodes", type=int, default=4)
    up.add_argument("--gpu", choices=tuple(GPUS), default="h100")
    up.add_argument("--gpus-per-node", type=int, default=8)
    up.add_argument("--cuda", choices=tuple(DRIVERS), default="13.0", help="driver CUDA version")
    up.add_argument("--node", action="append", default=[], metavar="NAME:KEY=VALUE",
                    help="per-node override; keys: gpus gpu cuda disk daemon_json user "
                         "load_seconds pull_seconds nvidia_toolkit decode_tok_s compile_seconds profile "
                         "second_nic (ADDRESS/PREFIX: an eth1 on a subnet of its own) "
                         "shared_hf (false: this node misses the --shared-hf mount) "
                         "engine_fault (oom|nccl|parser: its rank fails at start as SGLang does)")
    up.add_argument("--profile", default="", metavar="NAME[,NAME...]",
                    help="node behaviour as an upstream version has it, on every node "
                         "(`testbed profiles` lists them)")
    up.add_argument("--disk", default="4G", help="NVMe (tmpfs) size per node")
    up.add_argument("--shared-hf", action="store_true",
                    help="one host directory mounted at /mnt/k3tb-shared on every node, the "
                         "inventory's HF cache (download.shared: true)")
    up.add_argument("--load-seconds", type=float, default=2.0, help="stand-in engine load time")
    up.add_argument("--compile-seconds", type=float, default=0.0,
                    help="stand-in engine kernel compile time when no matching cache is mounted")
    up.add_argument("--pull-seconds", type=float, default=0.5, help="stand-in docker pull time")
    up.add_argument("--engine", choices=ENGINES, default="sglang", help="inventory engine.kind")
    up.add_argument("--shard-bytes", type=int, help="size of each mock shard")
    up.add_argument("--shards", type=int, default=96, help="how many shards the mock repo has")
    up.add_argument("--hub-rate", type=int, default=8 * 1024 * 1024,
                    help="mock Hub bytes/s per connection (0: unthrottled)")
    up.add_argument("--hub-node-rate", type=int, default=0,
                    help="mock Hub bytes/s per node over all its connections (0: unthrottled)")
    up.add_argument("--hub-token-file", help="the mock Hub's granted bearer tokens, one per line "
                    "(without --hub-gated every request needs one); a line 'TOKEN fine-grained-no-gated' "
                    "is a fine-grained token without gated-repo read access (a plain 403)")
    up.add_argument("--hub-gated", action="store_true",
                    help="the real gate: API and tree public, /resolve 401 without a token, 403 with "
                         "one not in --hub-token-file")
    up.add_argument("--hub-cdn", action="store_true",
                    help="/resolve of LFS files answers 302 to a CDN (signed URLs, its own port)")
    up.add_argument("--hub-url-ttl", type=int, default=3600, help="seconds a signed CDN URL is valid")
    up.add_argument("--hub-conn-rates", metavar="SLOW,FAST,FRACTION",
                    help="each new CDN connection runs at SLOW bytes/s with probability FRACTION, "
                         "else FAST (needs --hub-cdn)")
    up.add_argument("--hub-conn-seed", type=int, default=1, help="seed of the --hub-conn-rates draws")
    up.add_argument("--hub-cdn-tls", action="store_true",
                    help="the CDN answers over TLS; every node trusts its certificate (needs --hub-cdn)")
    up.add_argument("--hub-first-byte-ms", type=float, default=0.0,
                    help="ms the CDN waits before each answer (needs --hub-cdn)")
    up.add_argument("--no-hub", action="store_true",
                    help="no mock Hub (the inventory endpoint then has no server behind it)")
    up.add_argument("--groups", type=int, default=1,
                    help="a fleet: the nodes in N equal groups, in order; the inventory a fleet "
                         "inventory with the router (the real SMG) on the first group's head")
    up.add_argument("--ssh-gateway", action="store_true",
                    help="every node's SSH at one gateway address, node i on port 40100+i (a "
                         "forwarding namespace); the inventory's address/port say so, each "
                         "node's own address is its private_address")


FAULT_FORMS = """arguments:
  kill-node|revive-node|partition|firewall|heal|fill-disk|free-disk NODE
  peer-corrupt|peer-heal NODE             that node's peer server flips bytes / serves true ones
  wedge-engine|unwedge-engine NODE, slow-prefill NODE [SECONDS], engine-fault NODE oom|nccl|parser|none
  slow-link NODE MBIT                     that node's link throttled both ways (0: the testbed's link)
  hub-drop-after BYTES, hub-corrupt FILE, hub-heal, hub-outage SECONDS [--status S],
  hub-rate-limit QUOTA WINDOW, cdn-forbid N"""


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="testbed", description="a simulated GPU cluster on this machine")
    sub = top.add_subparsers(dest="command", required=True)
    _up_parser(sub)
    down = sub.add_parser("down", help="stop everything the testbed started (safe to repeat)")
    down.add_argument("--dir", required=True, type=Path)
    fault = sub.add_parser("fault", help=f"inject a fault: {', '.join(faults.ACTIONS)}",
                           epilog=FAULT_FORMS, formatter_class=argparse.RawDescriptionHelpFormatter)
    fault.add_argument("--dir", required=True, type=Path)
    fault.add_argument("action", choices=faults.ACTIONS)
    fault.add_argument("args", nargs="*")
    fault.add_argument("--status", type=int, help="hub-outage: the status every request gets (503)")
    stat = sub.add_parser("stats", help="what the Hub served and the stand-ins were asked")
    stat.add_argument("--dir", required=True, type=Path)
    stat.add_argument("--json", action="store_true", help="one JSON document")
    sub.add_parser("profiles", help="list the node behaviour profiles and their upstream sources")
    return top


def _up(args) -> int:
    defaults = {"gpu": args.gpu, "gpus": args.gpus_per_node, "cuda": args.cuda, "disk": args.disk,
                "load_seconds": args.load_seconds, "pull_seconds": args.pull_seconds,
                "compile_seconds": args.compile_seconds,
                **({"shared_hf": True} if args.shared_hf else {})}
    if args.groups < 1 or args.nodes % args.groups:
        raise SpecError(f"--groups {args.groups} must divide --nodes {args.nodes} into equal "
                        "groups (a fleet's groups have one shape)")
    specs = build_specs(args.nodes, defaults, args.node, profiles.split_names(args.profile))
    if args.hub_token_file and not Path(args.hub_token_file).is_file():
        raise SpecError(f"--hub-token-file {args.hub_token_file}: no such file")
    _check_cdn_flags(args)
    opts = testbed.UpOptions(nodes=specs, gpu=args.gpu, gpus_per_node=args.gpus_per_node,
                             engine=args.engine, shard_bytes=args.shard_bytes, hub_rate=args.hub_rate,
                             hub_node_rate=args.hub_node_rate,
                             hub_token_file=args.hub_token_file, hub=not args.no_hub,
                             hub_cdn=args.hub_cdn, hub_url_ttl=args.hub_url_ttl,
                             hub_conn_rates=args.hub_conn_rates, hub_conn_seed=args.hub_conn_seed,
                             hub_gated=args.hub_gated, shared_hf=args.shared_hf, shards=args.shards,
                             hub_cdn_tls=args.hub_cdn_tls, hub_first_byte_ms=args.hub_first_byte_ms,
                             ssh_gateway=args.ssh_gateway, groups=args.groups)
    testbed.up(args.dir, opts)
    return 0


def _check_cdn_flags(args) -> None:
    if args.hub_conn_rates:
        if not args.hub_cdn:
            raise SpecError("--hub-conn-rates needs --hub-cdn (it sets the CDN's connection speeds)")
        try:
            parse_conn_rates(args.hub_conn_rates)
        except ValueError as err:
            raise SpecError(str(err).replace("--conn-rates", "--hub-conn-rates")) from None
    for flag, given in (("--hub-cdn-tls", args.hub_cdn_tls), ("--hub-first-byte-ms", args.hub_first_byte_ms)):
        if given and not args.hub_cdn:
            raise SpecError(f"{flag} needs --hub-cdn (it is a setting of the CDN)")
    if args.hub_first_byte_ms < 0 or args.shards < 1:
        raise SpecError("--hub-first-byte-ms must be >= 0 and --shards >= 1")
    if args.hub_url_ttl <= 0:
        raise SpecError("--hub-url-ttl must be > 0 seconds")


def _down(args) -> int:
    if not testbed.down(args.dir):
        print(f"nothing is up in {args.dir}")
    return 0


def _fault(args) -> int:
    print(faults.apply(args.dir, args.action, args.args, status=args.status))
    return 0


def _stats(args) -> int:
    doc = stats.collect(args.dir)
    if args.json:
        print(json.dumps(doc, indent=1, sort_keys=True))
        return 0
    for name, data in doc["hub"].get("by_node", {}).items():
        print(f"hub -> {name}: {data.get('bytes', 0)} bytes, {data.get('requests', 0)} requests")
    for name, data in doc["cdn"].get("by_node", {}).items():
        print(f"cdn -> {name}: {data.get('bytes', 0)} bytes, {data.get('requests', 0)} requests")
    for name, data in doc["nodes"].items():
        tools = sorted({c.get("tool", "?") for c in data["calls"]})
        print(f"{name}: {len(data['calls'])} stand-in calls ({', '.join(tools) or 'none'})")
    return 0


def _profiles(_args) -> int:
    print(profiles.listing())
    return 0


COMMANDS = {"up": _up, "down": _down, "fault": _fault, "stats": _stats, "profiles": _profiles}


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command not in ("stats", "profiles") and os.geteuid() != 0:
        print("testbed: must run as root (namespaces, mounts, iptables)", file=sys.stderr)
        return EXIT_FAILED
    try:
        return COMMANDS[args.command](args)
    except (SpecError, KeyError, faults.FaultError) as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"testbed {args.command}: error: {message}", file=sys.stderr)
        return EXIT_USAGE
    except (RuntimeError, OSError, subprocess.SubprocessError) as err:
        print(f"testbed {args.command}: error: {err}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:  # `up` has already taken down what it started
        print(f"testbed {args.command}: interrupted", file=sys.stderr)
        return 130

#!/usr/bin/env python3
"""Node side of "the image from peers": which peer holds an image, and loading it from one.

Runs on a GPU node (standard library only). The peer server (peer_server.py, `/image?ref=R`)
answers HEAD with the image's ID in `X-K3-Image-Id` and GET with `docker save R` streamed,
behind the cluster's peer secret.

    python3 image_peers.py probe --refs R[,R] --peers NAME=IP[,..] --port P --secret-file F
        prints {ref: {"node", "addr", "id"}}: the first peer (in the order given) holding each;
        {} at once when this node already holds one of the refs
    python3 image_peers.py load --ref R --peer IP:PORT --secret-file F --expect-id sha256:..
        streams the peer's `docker save` into `docker load`, then checks that the loaded
        image's ID is the one the peer reported; a different ID is removed again (exit 1)
Exit codes: 0 done; 1 the load failed or the ID differs; 2 bad input.
"""
from __future__ import annotations

import argparse
import http.client
import json
import subprocess
import sys
import urllib.parse

PROBE_TIMEOUT = 3.0
CHUNK = 4 << 20


def secret(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def _ask(addr: str, port: int, method: str, ref: str, token: str, timeout: float | None):
    conn = http.client.HTTPConnection(addr, port, timeout=timeout)
    conn.request(method, "/image?" + urllib.parse.urlencode({"ref": ref}),
                 headers={"Authorization": f"Bearer {token}"})
    return conn, conn.getresponse()


def holder(ref: str, peers: list[tuple[str, str]], port: int, token: str) -> dict | None:
    for name, addr in peers:
        try:
            conn, resp = _ask(addr, port, "HEAD", ref, token, PROBE_TIMEOUT)
            conn.close()
        except OSError:
            continue   # down, partitioned or no server: another peer, or the registry
        image_id = resp.getheader("X-K3-Image-Id")
        if resp.status == 200 and image_id:
            return {"node": name, "addr": addr, "id": image_id}
    return None


def probe(args) -> int:
    token = secret(args.secret_file)
    peers = [tuple(p.split("=", 1)) for p in args.peers.split(",") if "=" in p]
    refs = list(filter(None, args.refs.split(",")))
    found = {}
    # A node holding one of the candidate tags asks no peer: every run looks at this fact,
    # and asking each peer for the tag it does not hold (the other CUDA build) cost every node
    # a round trip and a `docker image inspect` per peer (27 s of a 32-node no-op `up`). Its
    # driver changing CUDA builds under it is the one case this leaves to the registry.
    if any(image_id(ref) for ref in refs):
        refs = []
    for ref in refs:
        where = holder(ref, peers, args.port, token) if token else None
        if where:
            found[ref] = where
    print(json.dumps(found))
    return 0


def image_id(ref: str) -> str | None:
    out = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", ref],
                         capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def load(args) -> int:
    token = secret(args.secret_file)
    if not token:
        print(f"image_peers: cannot read the peer secret {args.secret_file}", file=sys.stderr)
        return 2
    addr, _, port = args.peer.rpartition(":")
    conn, resp = _ask(addr, int(port), "GET", args.ref, token, 60)
    if resp.status != 200:
        print(f"image_peers: {args.peer} answered {resp.status} for {args.ref}", file=sys.stderr)
        return 1
    loader = subprocess.Popen(["docker", "load"], stdin=subprocess.PIPE)
    try:
        while chunk := resp.read(CHUNK):
            loader.stdin.write(chunk)
    except OSError as e:
        print(f"image_peers: the stream from {args.peer} broke: {e}", file=sys.stderr)
    finally:
        loader.stdin.close()
        conn.close()
    if loader.wait() != 0:
        return 1
    got = image_id(args.ref)
    if got != args.expect_id:
        print(f"image_peers: loaded {args.ref} has ID {got}, {args.peer} holds {args.expect_id}; "
              "removed", file=sys.stderr)
        subprocess.run(["docker", "rmi", args.ref], capture_output=True)
        return 1
    print(f"image_peers: {args.ref} loaded from {args.peer}, ID {got} verified")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="The engine image from a peer.")
    sub = parser.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("probe")
    p.add_argument("--refs", required=True)
    p.add_argument("--peers", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--secret-file", required=True)
    p = sub.add_parser("load")
    for flag in ("--ref", "--peer", "--secret-file", "--expect-id"):
        p.add_argument(flag, required=True)
    args = parser.parse_args(argv)
    return probe(args) if args.mode == "probe" else load(args)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Node side of "the image from peers": which peer holds an image, and loading it from one.

Runs on a GPU node (standard library only). The peer server (peer_server.py, `/image?ref=R`)
answers HEAD with the image's ID in `X-K3-Image-Id` and its content key (content_key) in
`X-K3-Image-Content`, and GET with `docker save R` streamed, behind the cluster's peer secret.

    python3 image_peers.py fetch --ref R --peers NAME=IP[,..] --port P --secret-file F
        asks the peers in the order given for R, loads it from the first that holds it (as
        below); with no peer holding it, pulls R from its registry
    python3 image_peers.py load --ref R --peer IP:PORT --secret-file F --expect-content KEY
        streams the peer's `docker save` into `docker load`, then checks that the loaded
        image's content key is the one the peer reported; when the copy cannot be proven (the
        stream or the load failed, or the key differs) the copy is removed and R is pulled
        from its registry instead
Exit codes: 0 done (from the peer, or pulled); 1 the fallback pull failed too; 2 bad input.

The image ID cannot prove a copy: the legacy store's ID is the config's digest, containerd's
the index (or manifest) its image points at, and `docker save | docker load` from one store to
the other gives another ID (moby daemon/internal/image/tarexport/save.go writes a manifest of
its own making; daemon/containerd/image_exporter.go exports the pulled index). Both stores
report Created, Os, Architecture and RootFS.Layers from the one config blob that travels in
the tar (daemon/images/image_inspect.go, daemon/containerd/image_inspect.go@docker-v29.1.2),
and both loads check every layer against RootFS's diff IDs, so that is the key compared.
"""
from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import subprocess
import sys
import urllib.parse
from typing import TypedDict

PROBE_TIMEOUT = 3.0
CHUNK = 4 << 20


def secret(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def _ask(addr: str, port: int, method: str, ref: str, token: str,
         timeout: float | None) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    conn = http.client.HTTPConnection(addr, port, timeout=timeout)
    conn.request(method, "/image?" + urllib.parse.urlencode({"ref": ref}),
                 headers={"Authorization": f"Bearer {token}"})
    return conn, conn.getresponse()


class Holder(TypedDict):
    """A peer that holds the image: its name, address, image ID and content key."""
    node: str
    addr: str
    id: str
    content: str


def holder(ref: str, peers: list[tuple[str, str]], port: int, token: str) -> Holder | None:
    for name, addr in peers:
        try:
            conn, resp = _ask(addr, port, "HEAD", ref, token, PROBE_TIMEOUT)
            conn.close()
        except OSError:
            continue   # down, partitioned or no server: another peer, or the registry
        image_id, content = resp.getheader("X-K3-Image-Id"), resp.getheader("X-K3-Image-Content")
        if resp.status == 200 and image_id and content:
            return {"node": name, "addr": addr, "id": image_id, "content": content}
    return None


def image_id(ref: str) -> str | None:
    out = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", ref],
                         capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


class RootFS(TypedDict, total=False):
    Layers: list[str]


class InspectedImage(TypedDict, total=False):
    """The fields of a `docker image inspect` document that content_key reads, and its Id
    (the peer server's image route sends it: peer_image.py)."""
    Id: str
    Created: str
    Os: str
    Architecture: str
    RootFS: RootFS


def content_key(inspect_doc: InspectedImage) -> str:
    """What every image store reports alike of one image (see the module's docstring)."""
    agreed = [inspect_doc.get("Created"), inspect_doc.get("Os"), inspect_doc.get("Architecture"),
              (inspect_doc.get("RootFS") or {}).get("Layers") or []]
    return "sha256:" + hashlib.sha256(json.dumps(agreed).encode()).hexdigest()


def image_content(ref: str) -> str | None:
    """The content key of the image `ref` names here, or None when there is none."""
    out = subprocess.run(["docker", "image", "inspect", ref],
                         capture_output=True, text=True)
    try:
        return content_key(json.loads(out.stdout)[0]) if out.returncode == 0 else None
    except (ValueError, IndexError, TypeError, AttributeError):
        return None


def load(args: argparse.Namespace) -> int:
    token = secret(args.secret_file)
    if not token:
        print(f"image_peers: cannot read the peer secret {args.secret_file}", file=sys.stderr)
        return 2
    why = copy_from_peer(args, token)
    if why is None:
        print(f"image_peers: {args.ref} loaded from {args.peer}, content {args.expect_content} "
              f"verified (ID here {image_id(args.ref)})")
        return 0
    print(f"image_peers: the copy of {args.ref} from {args.peer} is not proven ({why}); "
          "pulling it from its registry", file=sys.stderr)
    return 0 if subprocess.run(["docker", "pull", args.ref]).returncode == 0 else 1


def fetch(args: argparse.Namespace) -> int:
    token = secret(args.secret_file)
    peers = [(name, addr) for name, _, addr in (p.partition("=") for p in args.peers.split(",") if "=" in p)]
    where = holder(args.ref, peers, args.port, token) if token else None
    if where is None:
        print(f"image_peers: no peer holds {args.ref}; pulling it from its registry")
        return 0 if subprocess.run(["docker", "pull", args.ref]).returncode == 0 else 1
    args.peer, args.expect_content = f"{where['addr']}:{args.port}", where["content"]
    print(f"image_peers: {where['node']} holds {args.ref}")
    return load(args)


def copy_from_peer(args: argparse.Namespace, token: str) -> str | None:
    """None when the peer's copy loaded and its content key is the peer's; else why not (a
    copy that loaded but differs is removed again)."""
    addr, _, port = args.peer.rpartition(":")
    try:
        conn, resp = _ask(addr, int(port), "GET", args.ref, token, 60)
    except OSError as e:
        return f"no answer: {e}"
    if resp.status != 200:
        conn.close()
        return f"the peer answered {resp.status}"
    loader = subprocess.Popen(["docker", "load"], stdin=subprocess.PIPE)
    stdin = loader.stdin
    assert stdin is not None  # stdin=PIPE
    try:
        while chunk := resp.read(CHUNK):
            stdin.write(chunk)
    except OSError as e:
        print(f"image_peers: the stream from {args.peer} broke: {e}", file=sys.stderr)
    finally:
        stdin.close()
        conn.close()
    if loader.wait() != 0:
        return "docker load failed"
    got = image_content(args.ref)
    if got != args.expect_content:
        subprocess.run(["docker", "rmi", args.ref], capture_output=True)
        return f"loaded content {got}, the peer holds {args.expect_content}; removed"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The engine image from a peer.")
    sub = parser.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("fetch")
    for flag in ("--ref", "--peers", "--secret-file"):
        p.add_argument(flag, required=True)
    p.add_argument("--port", type=int, required=True)
    p = sub.add_parser("load")
    for flag in ("--ref", "--peer", "--secret-file", "--expect-content"):
        p.add_argument(flag, required=True)
    args = parser.parse_args(argv)
    return fetch(args) if args.mode == "fetch" else load(args)


if __name__ == "__main__":
    sys.exit(main())

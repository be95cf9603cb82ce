"""The peer server's image route: a node without the engine image loads it from a peer that
holds it (remote/image_peers.py streams this into `docker load` and checks the loaded ID), so the
image crosses the Internet once per cluster. Standard library only; uploaded beside
peer_server.py. The request is already authorized (the peer secret) when it gets here.

HEAD|GET /image?ref=REF  ->  200 with X-K3-Image-Id and X-K3-Image-Content (the content key
the loader checks: image_peers.content_key; GET: the `docker save REF` tar), or 404
"""
import json
import os
import re
import socket
import subprocess
import time
from typing import IO, Protocol, cast
from urllib.parse import parse_qs, urlsplit

from image_peers import InspectedImage, content_key

# Checked before the ref reaches docker's argv: a reference, never an option or a path.
_IMAGE_REF = re.compile(r"^[a-z0-9][a-z0-9._/:-]{0,254}(@sha256:[0-9a-f]{64})?$")
CHUNK = 4 << 20


class Handler(Protocol):
    """What is used of peer_server.py's PeerHandler (an http.server BaseHTTPRequestHandler)."""
    path: str
    close_connection: bool
    connection: socket.socket
    client_address: tuple[str, int]

    def send_response(self, code: int, message: str | None = None) -> None: ...
    def send_header(self, _keyword: str, _value: str, /) -> None: ...
    def end_headers(self) -> None: ...
    def _status(self, status: int, headers: dict[str, str] | None = None) -> None: ...


def answer(handler: Handler, send_body: bool) -> None:
    ref = (parse_qs(urlsplit(handler.path).query).get("ref") or [""])[0]
    doc = _inspect(ref) if _IMAGE_REF.match(ref) else None
    if doc is None:
        handler._status(404)
        return
    handler.send_response(200)
    handler.send_header("X-K3-Image-Id", doc.get("Id", ""))
    handler.send_header("X-K3-Image-Content", content_key(doc))
    handler.send_header("Connection", "close")
    handler.end_headers()
    handler.close_connection = True
    if send_body:
        _stream(handler, ref)


def _inspect(ref: str) -> InspectedImage | None:
    found = _docker("image", "inspect", ref)
    try:
        doc = json.loads(found.stdout)[0] if found.returncode == 0 else None
    except (ValueError, IndexError):
        return None
    # docker's schema (InspectedImage) vouches for the object's fields; json.loads cannot
    return cast(InspectedImage, doc) if isinstance(doc, dict) else None


def _stream(handler: Handler, ref: str) -> None:
    began, saver = time.monotonic(), _docker_stream("save", ref)
    assert saver.stdout is not None   # stdout=PIPE: Popen opened it
    sent = _copy(handler.connection, saver.stdout)
    complete = saver.wait() == 0
    # In the server's own log, not --served-log: that one counts the weights' blobs.
    print(json.dumps({"t": time.time(), "client": handler.client_address[0], "image": ref,
                      "bytes": sent, "complete": complete,
                      "seconds": round(time.monotonic() - began, 4)}), flush=True)


def _copy(connection: socket.socket, stream: IO[bytes]) -> int:
    sent = 0
    try:
        while chunk := stream.read(CHUNK):
            connection.sendall(chunk)
            sent += len(chunk)
    except OSError:
        pass
    return sent


def _docker_argv(*args: str) -> list[str]:
    """docker as this server may call it: itself when root, else through `sudo -n` (the server
    runs as the login user, who may not be in the docker group)."""
    return ["docker", *args] if os.geteuid() == 0 else ["sudo", "-n", "docker", *args]


def _docker(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(_docker_argv(*args), capture_output=True, timeout=30)


def _docker_stream(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(_docker_argv(*args), stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)

"""The engine image from a peer, on loopback: the peer server's `/image?ref=` (HEAD: the ID;
GET: `docker save`) and remote/image_peers.py's fetch and load, against the docker stand-in's
save/load (two stand-in nodes, no testbed)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from test_peer_server import PORT, REMOTE, request
from test_peer_server import hub, nodes  # noqa: F401 (fixtures: the manifest's mock Hub, peers)

from k3deploy.remote.image_peers import content_key
from tests.testbed.test_standins import STANDINS, Node

pytestmark = pytest.mark.integration
IMAGE = "lmsysorg/sglang:kimi-k3"


@pytest.fixture
def docker_pair(tmp_path):
    made = []
    for name in ("a", "b"):
        (tmp_path / f"docker-{name}").mkdir()
        made.append(Node(tmp_path / f"docker-{name}"))
    for n in made:
        n.node_json({"image_size_mib": 2})
    yield made
    for n in made:
        n.kill_everything()


def standin_env(node: Node) -> dict:
    return {**node.env, "PATH": f"{STANDINS}:{node.env['PATH']}"}


def image_peers(node: Node, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REMOTE / "image_peers.py"), *args],
                          capture_output=True, text=True, env=standin_env(node), timeout=60)


def image_id(node: Node, ref: str = IMAGE) -> str:
    return node.docker("image", "inspect", "--format", "{{.Id}}", ref, check=0).stdout.strip()


def content(node: Node, ref: str = IMAGE) -> str:
    return content_key(json.loads(node.docker("image", "inspect", ref, check=0).stdout)[0])


def test_a_node_loads_the_image_from_the_peer_that_holds_it(nodes, docker_pair, monkeypatch):  # noqa: F811
    holder, taker = docker_pair
    peer_a, peer_b = nodes(["node0", "node1"])
    holder.pull(IMAGE)
    for key, value in standin_env(holder).items():
        monkeypatch.setenv(key, value)   # the server's docker is the holder's
    peer_a.start_server()
    status, headers, _ = request(peer_a, "HEAD", "/image?ref=" + IMAGE)
    assert status == 200 and headers["X-K3-Image-Id"] == image_id(holder)
    assert headers["X-K3-Image-Content"] == content(holder)
    assert request(peer_a, "HEAD", "/image?ref=" + IMAGE, secret="wrong" * 8)[0] == 401
    assert request(peer_a, "HEAD", "/image?ref=lmsysorg/sglang:nope")[0] == 404
    assert request(peer_a, "HEAD", "/image?ref=--help")[0] == 404   # never reaches docker's argv

    # The first peer in the list is gone: the next one that holds it is asked.
    peers = f"node9=127.0.0.250,node0={peer_a.ip}"
    load = image_peers(taker, "fetch", "--ref", IMAGE, "--peers", peers, "--port", str(PORT),
                       "--secret-file", str(peer_b.secret_file))
    assert load.returncode == 0, load.stderr
    assert f"node0 holds {IMAGE}" in load.stdout and f"Loaded image: {IMAGE}" in load.stdout
    assert "verified" in load.stdout and image_id(taker) == image_id(holder)
    assert registry_pulls(taker) == 0
    # A tag no peer holds (the other CUDA build) comes from its registry.
    cu12 = image_peers(taker, "fetch", "--ref", "lmsysorg/sglang:kimi-k3-cu12", "--peers", peers,
                       "--port", str(PORT), "--secret-file", str(peer_b.secret_file))
    assert cu12.returncode == 0 and "no peer holds" in cu12.stdout
    assert registry_pulls(taker) == 1
    log = peer_a.stop_server()
    served = [json.loads(line) for line in log.splitlines() if line.startswith('{"t"')]
    assert [(s["image"], s["complete"]) for s in served] == [(IMAGE, True)]


@pytest.mark.parametrize("stores", [("overlay2", "containerd"), ("containerd", "overlay2")])
def test_a_copy_across_image_stores_is_proven_by_its_config(nodes, docker_pair, monkeypatch,  # noqa: F811
                                                            stores):
    """Docker 28's legacy store and Docker 29's containerd store give one image two IDs
    (config digest, index digest) and a `save | load` between them a third: the copy is proven
    by what both read from the config, and the registry is not asked."""
    holder, taker = docker_pair
    holder.node_json({"image_size_mib": 2, "image_store": stores[0]})
    taker.node_json({"image_size_mib": 2, "image_store": stores[1]})
    peer_a = serve_image(nodes, holder, monkeypatch)
    load = load_from(taker, peer_a, content(holder))
    assert load.returncode == 0, load.stderr
    assert image_id(taker) != image_id(holder) and content(taker) == content(holder)
    assert "verified" in load.stdout and not registry_pulls(taker)
    peer_a.stop_server()


def test_a_copy_that_cannot_be_proven_is_removed_and_pulled(nodes, docker_pair, monkeypatch):  # noqa: F811
    holder, taker = docker_pair
    peer_a = serve_image(nodes, holder, monkeypatch)
    load = load_from(taker, peer_a, "sha256:" + "0" * 64)
    assert load.returncode == 0, load.stderr
    assert "removed" in load.stderr and "pulling it from its registry" in load.stderr
    assert registry_pulls(taker) == 1 and content(taker) == content(holder)
    # a peer that is gone: straight to the registry
    peer_a.stop_server()
    taker.docker("rmi", IMAGE, check=0)
    load = load_from(taker, peer_a, content(holder))
    assert load.returncode == 0 and "no answer" in load.stderr and registry_pulls(taker) == 2


def serve_image(nodes, holder: Node, monkeypatch):  # noqa: F811
    """node0's peer server, answering from `holder`'s docker, which holds the image."""
    (peer,) = nodes(["node0"])
    holder.pull(IMAGE)
    for key, value in standin_env(holder).items():
        monkeypatch.setenv(key, value)   # the server's docker is the holder's
    peer.start_server()
    return peer


def load_from(taker: Node, peer, expect_content: str) -> subprocess.CompletedProcess:
    return image_peers(taker, "load", "--ref", IMAGE, "--peer", f"{peer.ip}:{PORT}",
                       "--secret-file", str(peer.secret_file), "--expect-content", expect_content)


def registry_pulls(node: Node) -> int:
    return sum(1 for c in calls(node) if c["argv"][1:2] == ["pull"])


def calls(node: Node) -> list[dict]:
    path = node.run_dir / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


"""Docker and the NVIDIA container toolkit as real hosts have them (issue 18, items 2-4 and 6),
on the stand-ins' profiles: the containerd image store of a fresh Docker 29 with a symlinked
NVMe mount, the toolkit's hook without an `nvidia` runtime entry, a digest-pinned image on both
image stores, and a node without the toolkit."""

import sys

import pytest
import yaml
from tbfixture import REPO, testbed

from k3run import changing_calls, k3, out, state

pytestmark = pytest.mark.integration

sys.path.insert(0, str(REPO / "scripts" / "tb" / "standins"))
from tbstand import images as registry  # noqa: E402  (the stand-in registry's digests)

IMAGE = "lmsysorg/sglang:kimi-k3"
PINNED = f"lmsysorg/sglang@{registry.manifest_digest(IMAGE)}"
# node0: fresh Docker 29 (containerd image store), NVMe reached through a symlink, toolkit
# configured; node1: Docker 28 (overlay2), the toolkit's hook only.
PROFILES = ["node0:profile=docker-29-containerd", "node0:profile=nvme-symlinked",
            "node1:profile=toolkit-hook-only"]


def _du(tb, node, path) -> int:
    return int(tb.ssh(node, f"du -sbL {path} | cut -f1").stdout.split()[0])


def test_digest_pinned_bringup_on_both_image_stores(tmp_path):
    with testbed(tmp_path, nodes=2, gpu="b300", node=PROFILES) as tb:
        doc = yaml.safe_load(tb.inventory.read_text())
        doc["engine"]["image"] = PINNED
        tb.inventory.write_text(yaml.safe_dump(doc))
        inv = str(tb.inventory)
        root_disk_before = _du(tb, "node0", "/var/lib/containerd")

        up = k3("up", "-i", inv)
        assert up.returncode == 0, out(up)
        # dockerd reports the data-root with the symlink evaluated; the step compared it so
        assert tb.ssh("node0", "docker info -f '{{.DockerRootDir}}'").stdout.strip() == \
            "/mnt/disks/nvme0n1/docker"
        # Docker 29: the image is in containerd's root, now on the NVMe; the root disk got
        # none of its bytes (compressed and unpacked copies are both on the NVMe)
        assert "root = \"/mnt/nvme/containerd\"" in tb.ssh("node0", "cat /etc/containerd/config.toml").stdout
        assert _du(tb, "node0", "/var/lib/containerd") == root_disk_before
        assert _du(tb, "node0", "/mnt/nvme/containerd") >= 2 * 4 * 2**20  # the stand-in image: 4 MiB, stored twice
        for node in tb.nodes:
            found = tb.ssh(node, f"docker image inspect -f '{{{{json .RepoDigests}}}}' {PINNED}")
            assert PINNED in found.stdout, (node, found.stdout, found.stderr)
        pulls = [c for c in changing_calls(tb.stats()) if c[1:2] == ["pull"]]
        assert len(pulls) == 2, pulls
        _rerun_changes_nothing(tb, inv)

        verify = k3("verify", "-i", inv)
        assert verify.returncode == 0, out(verify)
        down = k3("down", "-i", inv)
        assert down.returncode == 0, out(down)


def test_check_names_the_node_without_the_toolkit_and_the_fix(tmp_path):
    with testbed(tmp_path, nodes=2, gpu="b300", node=["node1:profile=no-toolkit"]) as tb:
        check = k3("check", "-i", str(tb.inventory), env={"COLUMNS": "400"})  # rows unwrapped
        assert check.returncode == 1, out(check)
        said = out(check)
        assert "node1" in said and "nvidia-container-runtime-hook is not on dockerd's PATH" in said
        assert "apt-get install nvidia-container-toolkit" in said
        rows = [line for line in said.splitlines() if "docker cannot give containers GPUs" in line]
        assert rows and all("node0" not in row for row in rows), said
        assert changing_calls(tb.stats()) == []


def test_a_tag_image_crosses_from_docker_28_to_docker_29_by_peer(tmp_path):
    """One Docker 28 (legacy store: ID = config digest) and one Docker 29 (containerd store:
    ID = index digest) node, a tag image, peers on: the head pulls, node1 loads it from the
    head, proven by the config both stores read, and a re-run changes nothing."""
    mixed = ["node0:profile=docker-28-overlay2", "node1:profile=docker-29-containerd"]
    with testbed(tmp_path, nodes=2, gpu="b300", node=mixed) as tb:
        inv = str(tb.inventory)
        up = k3("up", "-i", inv)
        assert up.returncode == 0, out(up)
        ids = {n: tb.ssh(n, f"docker image inspect -f '{{{{.Id}}}}' {IMAGE}").stdout.strip()
               for n in tb.nodes}
        assert ids["node0"] != ids["node1"], ids   # the two stores' IDs of one image
        pulls = {n: [c for c in tb.stats()["nodes"][n]["calls"] if c["argv"][1:2] == ["pull"]]
                 for n in tb.nodes}
        assert len(pulls["node0"]) == 1 and pulls["node1"] == [], pulls
        _rerun_changes_nothing(tb, inv)
        assert k3("down", "-i", inv).returncode == 0


def _rerun_changes_nothing(tb, inv) -> None:
    """A second `up` succeeds, asks the stand-ins for no change, and leaves every step ok."""
    calls = len(changing_calls(tb.stats()))
    again = k3("up", "-i", inv)
    assert again.returncode == 0, out(again)
    assert len(changing_calls(tb.stats())) == calls, changing_calls(tb.stats())[calls:]
    for node in tb.nodes:
        steps = state(tb.inventory, node)["steps"]
        assert {s["status"] for s in steps.values()} == {"ok"}, (node, steps)

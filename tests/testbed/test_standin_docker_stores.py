"""The docker stand-in's two image stores, digest pulls, data-root canonicalisation and the
GPU device driver, against the real outputs in tests/fixtures/real/docker (issue 18)."""

import json
from pathlib import Path

import pytest
from test_standins import Node

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "docker"
IMAGE = "lmsysorg/sglang:kimi-k3"


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path)
    yield n
    n.kill_everything()


def digest_of(node, ref=IMAGE):
    out = node.docker("pull", ref, check=0).stdout
    return next(line.split()[1] for line in out.splitlines() if line.startswith("Digest: "))


def inspect(node, ref):
    return json.loads(node.docker("image", "inspect", ref, check=0).stdout)[0]


def test_legacy_store_keeps_a_digest_pull_out_of_repotags(node):
    digest = digest_of(node)
    pinned = f"lmsysorg/sglang@{digest}"
    doc = inspect(node, IMAGE)
    assert (doc["RepoTags"], doc["RepoDigests"]) == ([IMAGE], [pinned])
    node.docker("rmi", IMAGE, check=0)
    out = node.docker("pull", pinned, check=0).stdout.splitlines()
    assert out[0] == f"{digest}: Pulling from lmsysorg/sglang"
    assert out[-2:] == [f"Status: Downloaded newer image for {pinned}", f"docker.io/{pinned}"]
    doc = inspect(node, pinned)
    assert (doc["RepoTags"], doc["RepoDigests"]) == ([], [pinned])
    assert doc["Id"] != digest  # the legacy Id is the config digest, not the manifest's
    assert "Image is up to date" in node.docker("pull", pinned, check=0).stdout
    unknown = node.docker("pull", "lmsysorg/sglang@sha256:" + "0" * 64)
    assert unknown.returncode == 1 and "manifest unknown" in unknown.stderr


def test_containerd_store_keeps_images_under_its_root_twice(node):
    node.node_json({"image_store": "containerd", "docker_version": "29.1.2", "image_size_mib": 2})
    info = json.loads(node.docker("info", "--format", "{{json .}}", check=0).stdout)
    assert info["Driver"] == "overlayfs" and info["DriverStatus"] == [["driver-type", "io.containerd.snapshotter.v1"]]
    assert info["ServerVersion"] == "29.1.2" and info["DockerRootDir"] == "/var/lib/docker"
    digest = digest_of(node)
    doc = inspect(node, IMAGE)
    assert doc["Id"] == digest and doc["RepoDigests"] == [f"lmsysorg/sglang@{digest}"]
    pinned = f"lmsysorg/sglang@{digest}"
    first = node.docker("pull", pinned, check=0).stdout.splitlines()[0]
    assert first == f"docker.io/{pinned}: Pulling from lmsysorg/sglang"
    doc = inspect(node, pinned)
    # every name in RepoTags, in name order (containerd lists its bolt keys sorted)
    assert doc["RepoTags"] == [IMAGE, pinned] and doc["RepoDigests"] == [pinned]
    blobs = node.rootfs / "var/lib/containerd/io.containerd.content.v1.content/blobs/sha256"
    snaps = node.rootfs / "var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots"
    size = 2 << 20
    assert sum(f.stat().st_size for f in blobs.iterdir()) >= size
    assert sum(f.stat().st_size for f in snaps.rglob("layer.bin")) == size
    assert not (node.rootfs / "var/lib/docker/overlay2").exists()


def test_containerd_root_moves_only_when_containerd_restarts(node):
    node.node_json({"image_store": "containerd"})
    node.pull()
    (node.etc_containerd / "config.toml").write_text('root = "/mnt/nvme/containerd"\n')
    assert node.docker("images", "-q", check=0).stdout.strip()  # containerd still on its old root
    node.systemctl("restart", "containerd", check=0)
    assert node.docker("images", "-q", check=0).stdout == ""
    node.pull()
    assert (node.rootfs / "mnt/nvme/containerd/io.containerd.content.v1.content/blobs").is_dir()
    (node.etc_containerd / "config.toml").write_text("root = \n")
    r = node.systemctl("restart", "containerd")
    assert r.returncode == 1 and "Job for containerd.service failed" in r.stderr


def test_without_a_system_containerd_the_images_follow_data_root(node):
    (node.rootfs / "run/containerd/containerd.sock").unlink()
    node.node_json({"image_store": "containerd"})
    node.pull()
    assert (node.rootfs / "var/lib/docker/containerd/daemon/io.containerd.content.v1.content").is_dir()
    assert not (node.rootfs / "var/lib/containerd").exists()


def test_data_root_reported_canonical(node):
    disk = node.rootfs / "mnt/disks/nvme0n1"
    (disk / "docker").mkdir(parents=True)
    (node.rootfs / "mnt/nvme").symlink_to("disks/nvme0n1")
    (node.etc / "daemon.json").write_text('{"data-root": "/mnt/nvme/docker/"}')
    assert node.docker("info", "-f", "{{.DockerRootDir}}", check=0).stdout == "/mnt/disks/nvme0n1/docker\n"


def test_gpus_need_the_hook_not_the_runtime_entry(node):
    node.pull()
    info = json.loads(node.docker("info", "--format", "{{json .Runtimes}}", check=0).stdout)
    assert "nvidia" not in info   # no daemon.json entry: the hook alone serves --gpus
    node.docker("run", "-d", "--gpus", "all", IMAGE, "sleep", "1", check=0)
    (node.etc / "daemon.json").write_text(json.dumps(
        {"runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}}}))
    node.systemctl("restart", "docker", check=0)
    runtimes = json.loads(node.docker("info", "--format", "{{json .Runtimes}}", check=0).stdout)
    assert runtimes["nvidia"] == {"path": "nvidia-container-runtime"}


def test_run_errors_read_as_published(node):
    node.node_json({"nvidia_toolkit": False})
    node.pull()
    r = node.docker("run", "-d", "--gpus", "all", IMAGE, "sleep", "1")
    assert r.returncode == 125 and r.stderr == (REAL / "28.5.1/run-no-toolkit.txt").read_text()
    node.kill_everything()
    node.systemctl("stop", "docker", "docker.socket", check=0)
    node.node_json({"cuda": "12.4", "driver": "550.54.15"})
    node.systemctl("start", "docker", check=0)
    node.pull("lmsysorg/sglang:kimi-k3-cu12")
    r = node.docker("run", "-d", "--gpus", "all", "lmsysorg/sglang:kimi-k3-cu12", "sleep", "1")
    published = (REAL / "28.5.1/run-cuda-too-old.txt").read_text().splitlines()
    assert r.returncode == 125 and r.stderr.splitlines()[:2] == published


def _shape(line):
    """A pull line with its names and hashes abstracted: what both outputs must share."""
    import re
    line = re.sub(r"sha256:[0-9a-f]{64}", "DIGEST", line)
    line = re.sub(r"^[0-9a-f]{12}: ", "LAYER: ", line)
    return re.sub(r"^\S+: Pulling from \S+$", "TAG: Pulling from REPO", re.sub(
        r"(for |^docker\.io/)\S+$", r"\1REF", line))


def test_pull_output_has_the_published_shape(node):
    published = [_shape(line) for line in (REAL / "28.5.1/pull-nontty.txt").read_text().splitlines()
                 if not line.startswith("Using default tag")]
    ours = [_shape(line) for line in node.docker("pull", IMAGE, check=0).stdout.splitlines()
            if not line.endswith(("Pulling fs layer", "Download complete"))]
    assert ours == published

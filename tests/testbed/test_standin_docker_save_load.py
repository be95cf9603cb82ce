"""`docker save` / `docker load` in the docker stand-in: a tar on stdout, loaded from stdin on
another node, the image ID kept within a store and changed across stores, and the lines moby
prints (scripts/tb/standins/tbstand/imagetar.py names the upstream files)."""

import json
import subprocess
import tarfile

import pytest
from test_standins import STANDINS, Node

IMAGE = "lmsysorg/sglang:kimi-k3"


@pytest.fixture
def pair(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    nodes = Node(tmp_path / "a"), Node(tmp_path / "b")
    yield nodes
    for n in nodes:
        n.kill_everything()


def inspect(node, ref):
    return json.loads(node.docker("image", "inspect", ref, check=0).stdout)[0]


def save_to(node, ref, path):
    with open(path, "wb") as out:
        return subprocess.run([str(STANDINS / "docker"), "save", ref], stdout=out,
                              stderr=subprocess.PIPE, env=node.env, timeout=30).returncode


@pytest.mark.parametrize("store", ["overlay2", "containerd"])
def test_saved_image_loads_on_another_node_with_its_id(pair, tmp_path, store):
    src, dst = pair
    for n in pair:
        n.node_json({"image_store": store, "docker_version": "29.1.2", "image_size_mib": 2})
    src.pull(IMAGE)
    tar_path = tmp_path / "image.tar"
    assert save_to(src, IMAGE, tar_path) == 0
    with tarfile.open(tar_path) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))
        assert manifest[0]["RepoTags"] == [IMAGE]
        layer = tar.getmember(manifest[0]["Layers"][0])
        assert layer.size == 2 << 20
        index = json.load(tar.extractfile("index.json"))
        assert index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"] == "kimi-k3"
    with open(tar_path, "rb") as stdin:
        out = dst.docker("load", stdin=stdin, check=0).stdout
    assert out.splitlines() == [f"Loaded image: {IMAGE}"]
    assert inspect(dst, IMAGE)["Id"] == inspect(src, IMAGE)["Id"]
    # the legacy store keeps no registry digest for a loaded image; containerd's names its target
    digests = inspect(dst, IMAGE)["RepoDigests"]
    assert digests == ([] if store == "overlay2" else inspect(src, IMAGE)["RepoDigests"])


AGREED = ("Created", "Os", "Architecture", "RootFS")


@pytest.mark.parametrize("source,target", [("overlay2", "containerd"), ("containerd", "overlay2")])
def test_a_load_across_image_stores_gets_another_id_and_the_same_config(pair, tmp_path, source,
                                                                         target):
    """Legacy ID = config digest, containerd ID = the target index.json names (save.go writes
    a manifest of its own; image_exporter.go exports the pulled index): the ID changes, what
    inspect reads from the config blob does not."""
    src, dst = pair
    src.node_json({"image_store": source, "docker_version": "29.1.2", "image_size_mib": 2})
    dst.node_json({"image_store": target, "docker_version": "29.1.2", "image_size_mib": 2})
    src.pull(IMAGE)
    tar_path = tmp_path / "image.tar"
    assert save_to(src, IMAGE, tar_path) == 0
    with open(tar_path, "rb") as stdin:
        assert dst.docker("load", stdin=stdin, check=0).stdout.splitlines() == [f"Loaded image: {IMAGE}"]
    there, here = inspect(src, IMAGE), inspect(dst, IMAGE)
    assert here["Id"] != there["Id"]
    assert {k: here[k] for k in AGREED} == {k: there[k] for k in AGREED}
    if target == "overlay2":   # the loaded ID is the config digest a pull of the tag gets
        (tmp_path / "fresh").mkdir()
        fresh = Node(tmp_path / "fresh")
        try:
            fresh.pull(IMAGE)
            assert here["Id"] == inspect(fresh, IMAGE)["Id"] and here["RepoDigests"] == []
        finally:
            fresh.kill_everything()
    else:   # containerd names the loaded target: the manifest the legacy save wrote
        assert here["RepoDigests"] == [f"lmsysorg/sglang@{here['Id']}"]


def test_load_rejects_a_cut_stream_and_save_an_unknown_image(pair, tmp_path):
    src, dst = pair
    src.pull(IMAGE)
    tar_path = tmp_path / "image.tar"
    save_to(src, IMAGE, tar_path)
    cut = tmp_path / "cut.tar"
    cut.write_bytes(tar_path.read_bytes()[:4096])
    with open(cut, "rb") as stdin:
        bad = dst.docker("load", stdin=stdin)
    assert bad.returncode == 1 and bad.stderr.startswith("Error response from daemon:")
    assert dst.docker("image", "inspect", IMAGE).returncode == 1
    assert src.docker("save", "lmsysorg/sglang:nope").returncode == 1


def test_stats_counts_registry_pulls_per_node_from_the_calls_log():
    from tb.stats import registry_pulls
    calls = [{"tool": "docker", "argv": ["docker", "pull", IMAGE]},
             {"tool": "docker", "argv": ["docker", "image", "pull", IMAGE]},
             {"tool": "docker", "argv": ["docker", "load"]},
             {"tool": "docker", "argv": ["docker", "image", "inspect", IMAGE]},
             {"tool": "systemctl", "argv": ["systemctl", "pull"]}]
    assert registry_pulls(calls) == 2

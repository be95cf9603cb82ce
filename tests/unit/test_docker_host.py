"""docker_host's decisions (GPU access, image store) and containerd's config.toml editing."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

import pytest

from k3deploy.engines import image_ref
from k3deploy.facts.dockerd import DaemonJson, GpuHooks, parse_daemon_json, parse_gpu_hooks
from k3deploy.steps.disks import containerd_config, docker_host

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
from tb.nodefs import CONTAINERD_TOML  # noqa: E402  (containerd.io's shipped config.toml)


def hooks(*paths, cdi=()):
    out = "".join(f"hook {p}\n" for p in paths) + "".join(f"cdi {p}\n" for p in cdi)
    return parse_gpu_hooks(out, 0)


@pytest.mark.parametrize("found, version, works", [
    (hooks("/usr/bin/nvidia-container-runtime-hook"), "28.5.1", True),
    (hooks("/usr/local/sbin/nvidia-container-runtime-hook"), "29.1.2", True),
    (hooks(), "29.1.2", False),
    # nvidia-cdi-hook counts from docker-v29.2.0 on, and only with a CDI spec to inject
    (hooks("/usr/bin/nvidia-cdi-hook", cdi=["/var/run/cdi/nvidia.yaml"]), "29.1.2", False),
    (hooks("/usr/bin/nvidia-cdi-hook", cdi=["/var/run/cdi/nvidia.yaml"]), "29.2.0", True),
    (hooks("/usr/bin/nvidia-cdi-hook"), "29.7.2", False),
    (hooks(), None, False),
])
def test_gpu_access_is_judged_by_the_hook_on_dockerds_path(found, version, works):
    problem = docker_host.gpu_access_problem(found, version)
    assert (problem is None) is works
    if problem:
        assert "nvidia-container-runtime-hook is not on dockerd's PATH" in problem
        assert "apt-get install nvidia-container-toolkit" in problem and "restart docker" in problem


def test_the_hook_probes_lines_are_typed_paths():
    found = hooks("/usr/bin/nvidia-cdi-hook", cdi=["/etc/cdi/nvidia.yaml"])
    assert found == GpuHooks(("/usr/bin/nvidia-cdi-hook",), ("/etc/cdi/nvidia.yaml",))
    assert found.hook_names == {"nvidia-cdi-hook"}
    assert parse_gpu_hooks("", 0) == GpuHooks()


def test_the_hook_probe_looks_where_dockerd_looks():
    script = docker_host.gpu_hooks().script
    for d in docker_host.DOCKERD_PATH:
        assert f"{d}/nvidia-container-runtime-hook" in script
    assert "/etc/cdi/*" in script and "/var/run/cdi/*" in script


@pytest.mark.parametrize("status, containerd", [
    ('[["driver-type","io.containerd.snapshotter.v1"]]', True),
    ('[["Backing Filesystem","extfs"],["Supports d_type","true"]]', False),
    (None, False), ("not json", False),
])
def test_image_store_from_driver_status(status, containerd):
    assert docker_host.uses_containerd_store(status) is containerd


def test_containerd_root_set_in_the_shipped_config():
    assert containerd_config.root_of(CONTAINERD_TOML) == "/var/lib/containerd"
    changed = containerd_config.with_root(CONTAINERD_TOML, "/mnt/nvme/containerd")
    assert tomllib.loads(changed) == {"disabled_plugins": ["cri"], "root": "/mnt/nvme/containerd"}
    # every other line kept, comments included
    assert set(CONTAINERD_TOML.splitlines()) <= set(changed.splitlines())
    assert containerd_config.with_root(changed, "/mnt/nvme/containerd") == changed


def test_containerd_root_replaced_before_tables_and_in_empty_files():
    text = 'version = 2\nroot = "/var/lib/containerd"\n[plugins."io.containerd.grpc.v1.cri"]\n  root = "x"\n'
    changed = containerd_config.with_root(text, "/data/containerd")
    assert tomllib.loads(changed)["root"] == "/data/containerd"
    assert tomllib.loads(changed)["plugins"]["io.containerd.grpc.v1.cri"]["root"] == "x"
    table_first = '[debug]\n  level = "info"\n'
    assert tomllib.loads(containerd_config.with_root(table_first, "/d"))["root"] == "/d"
    assert tomllib.loads(containerd_config.with_root("", "/d")) == {"root": "/d"}
    with pytest.raises(containerd_config.ConfigError, match="not valid TOML"):
        containerd_config.root_of("root = ")


@pytest.mark.parametrize("ref, field, listed", [
    ("lmsysorg/sglang:kimi-k3", "RepoTags", "lmsysorg/sglang:kimi-k3"),
    ("docker.io/lmsysorg/sglang:kimi-k3", "RepoTags", "lmsysorg/sglang:kimi-k3"),
    ("ubuntu", "RepoTags", "ubuntu:latest"),
    ("docker.io/library/ubuntu:24.04", "RepoTags", "ubuntu:24.04"),
    ("localhost:5000/a/b", "RepoTags", "localhost:5000/a/b:latest"),
    ("lmsysorg/sglang@sha256:" + "a" * 64, "RepoDigests", "lmsysorg/sglang@sha256:" + "a" * 64),
    ("lmsysorg/sglang:kimi-k3@sha256:" + "a" * 64, "RepoDigests", "lmsysorg/sglang@sha256:" + "a" * 64),
])
def test_image_reference_forms(ref, field, listed):
    assert image_ref.parse(ref).wanted == (field, listed)


def test_daemon_json_is_kept_whole_and_refused_when_not_an_object():
    text = '{"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}, "data-root": "/d"}\n'
    found = parse_daemon_json(text, 0)
    assert found.data_root == "/d"
    assert json.loads(found.with_data_root("/mnt/nvme/docker")) == {
        "runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}, "data-root": "/mnt/nvme/docker"}
    assert parse_daemon_json("cat: /etc/docker/daemon.json: No such file or directory\n", 1) == \
        DaemonJson()
    assert parse_daemon_json("", 0) == DaemonJson()
    assert parse_daemon_json("{not json", 0) is None
    assert parse_daemon_json("[]", 0) is None


REAL_DAEMON_JSON = REPO / "tests" / "fixtures" / "real" / "docker" / "daemon-json"


@pytest.mark.parametrize("name, data_root", [("nvidia-default-runtime.json", None),
                                             ("graph-storage-driver-nvidia.json", "/data/docker")])
def test_a_real_daemon_json_is_read_whole_and_data_root_set_in_it(name, data_root):
    text = (REAL_DAEMON_JSON / name).read_text()
    found = parse_daemon_json(text, 0)
    assert found is not None and found.settings == json.loads(text)
    assert found.data_root == data_root   # "graph": data-root's name before docker 17.05
    merged = json.loads(found.with_data_root("/mnt/nvme/docker"))
    # "graph" beside "data-root" makes dockerd refuse to start: it goes, all else stays
    assert merged == {**{k: v for k, v in json.loads(text).items() if k != "graph"},
                      "data-root": "/mnt/nvme/docker"}
    assert merged["runtimes"]["nvidia"]["runtimeArgs"] == []

"""Every docker parser in k3deploy fed real (or upstream-reconstructed) docker output:
tests/fixtures/real/docker/<version>/*, each with its .source. Raw text in, value out."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from k3deploy.cli.status_cost import parse_started
from k3deploy.facts.docker import parse_inspect
from k3deploy.steps import probes
from k3deploy.steps.disks import docker_host
from k3deploy.steps.engine.wait import _finished_key

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "docker"
DIGEST = "sha256:a59906e33509d14c036c8678d687bd4eec81ed7c4b8ce907b888c607f6a1e0e6"
BUSYBOX = f"busybox@{DIGEST}"


def raw(name: str) -> str:
    path = REAL / name
    assert path.with_name(path.name + ".source").exists(), f"{name} has no .source"
    return path.read_text()


def info_field(text: str, key: str):
    return probes.docker_info("x", key).parse(text, 0)


@pytest.mark.parametrize("name, version, containerd", [
    ("28.5.1/info-overlay2.json", "17.06.1-ce", False),
    ("29.1.2/info-containerd.json", "29.1.2", True),
])
def test_docker_info_fields(name, version, containerd):
    text = raw(name)
    assert info_field(text, "ServerVersion") == version
    assert info_field(text, "DockerRootDir") == "/var/lib/docker"
    assert docker_host.uses_containerd_store(info_field(text, "DriverStatus")) is containerd


def test_docker_info_of_a_daemon_that_does_not_answer():
    assert info_field("", "DockerRootDir") is None
    assert info_field(raw("28.5.1/info-overlay2.json"), "DockerRootDir") is not None
    assert probes.docker_info("x", "DockerRootDir").parse("Cannot connect to the Docker daemon", 1) is None


@pytest.mark.parametrize("name, present", [
    # legacy store: a tag in RepoTags, a digest only in RepoDigests
    ("28.5.1/image-inspect-legacy-tag.json",
     {"busybox:latest", "busybox", "docker.io/library/busybox:latest", BUSYBOX}),
    ("28.5.1/image-inspect-legacy-digest.json", {BUSYBOX, "docker.io/" + BUSYBOX, f"busybox:v1@{DIGEST}"}),
    # containerd store: the same answers from its own RepoTags/RepoDigests
    ("29.1.2/image-inspect-containerd-tag.json", {"busybox:latest", BUSYBOX}),
    ("29.1.2/image-inspect-containerd-digest.json", {BUSYBOX}),
])
def test_image_found_by_tag_or_digest_on_both_stores(name, present):
    asked = sorted(present | {"busybox:1.36", "busybox@sha256:" + "0" * 64, "other/busybox:latest"})
    found = probes.parse_images(raw(name), asked)
    assert set(found) == present
    for ref in present:
        assert BUSYBOX in found[ref].digests


def test_container_documents_and_go_times():
    never = parse_inspect(raw("28.5.1/container-inspect-never-started.json"))
    assert never.status == "created" and never.exit_code == 128 and not never.running
    assert never.finished == never.started == "0001-01-01T00:00:00Z"
    assert parse_started(never.started) is None
    running = parse_inspect(raw("28.5.1/container-inspect-running.json"))
    assert running.running and running.image == "lmsysorg/sglang:kimi-k3"
    assert parse_started(running.started) == 1578301619
    exited = parse_inspect(raw("28.5.1/container-inspect-exited-trimmed.json"))
    assert exited.exit_code == 137
    # Go trims trailing zeros: 59.4618Z is later than 59.46187639Z's minute-earlier start, and
    # later than a FinishedAt of 59.46Z within the same second
    assert _finished_key(exited) == "2020-01-06T09:07:59.461800000"
    assert _finished_key(dataclasses.replace(exited, finished="2020-01-06T09:07:59.46Z")) < \
        _finished_key(exited)
    assert _finished_key(never) < _finished_key(exited)


def test_the_image_budget_is_what_each_store_keeps_from_its_docker_info():
    """13 GB pulled: the legacy store keeps the unpacked layers (~24 GB), Docker 29's
    containerd store those and the compressed blobs (~37 GB)."""
    gb = 10 ** 9
    legacy = docker_host.image_disk_bytes(13 * gb, info_field(raw("28.5.1/info-overlay2.json"), "DriverStatus"))
    both = docker_host.image_disk_bytes(13 * gb, info_field(raw("29.1.2/info-containerd.json"), "DriverStatus"))
    assert round(legacy / gb, 1) == 24.1 and round(both / gb, 1) == 37.1
    assert both - legacy == 13 * gb


def test_preflight_keeps_room_for_the_image_as_the_nodes_store_holds_it(tmp_path):
    from k3deploy.steps.checks.preflight import _disk_problems
    from tests.unit.invdata import four_nodes
    from tests.unit.preflight_facts import preflight_facts
    from tests.unit.test_shared_hf_plans import ctx
    gb = 10 ** 9
    node = ctx(tmp_path, rank=1, doc=four_nodes())
    checkpoint = node.run.inputs.manifest.total_bytes * 1.02
    free = int(checkpoint + 40 * gb)    # the checkpoint, 7 GB kept free and 33 GB for the image
    overlay2 = info_field(raw("28.5.1/info-overlay2.json"), "DriverStatus")
    containerd = info_field(raw("29.1.2/info-containerd.json"), "DriverStatus")
    def disk(status: str | None):
        return preflight_facts(free_bytes=free, have_bytes=0, driver_status=status)
    assert _disk_problems(disk(overlay2), node) == []
    [(check, message)] = _disk_problems(disk(containerd), node)
    assert check == "disk" and "37.14 GB for the image in this node's image store" in message


def test_a_pull_on_a_full_disk_is_a_disk_error_naming_the_node_and_data_root(tmp_path, monkeypatch):
    from k3deploy.core.errors import CommandError, DiskError
    from k3deploy.steps.engine import image
    from k3deploy.steps.base import Step
    from tests.unit.invdata import four_nodes
    from tests.unit.test_shared_hf_plans import ctx
    text = raw("20.10.5/pull-no-space.txt")
    assert image.disk_error_line("Pulling fs layer\n" + text).endswith("no space left on device")
    assert image.disk_error_line("Error response from daemon: manifest unknown") is None
    node = ctx(tmp_path, rank=1, doc=four_nodes())

    def failing(self, node, action, *more):
        raise CommandError(node.name, "docker pull x", 1, text)
    monkeypatch.setattr(Step, "run_action", failing)
    with pytest.raises(DiskError) as caught:
        image.PullImage().run_action(node, None)
    assert caught.value.node == node.name and "libnvvm.so.3.3.0: no space left" in str(caught.value)
    assert node.inv.paths.docker in caught.value.hint

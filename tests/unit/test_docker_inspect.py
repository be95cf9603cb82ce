"""The one reading of `docker inspect` (remote/docker_inspect.py, facts/docker.py), from real
outputs: raw text in, the typed Container out (tests/fixtures/real/docker/28.5.1/, each with
its .source); then the guard's judgement of its engine (remote/guard.py) from the same
records. Untyped, `docker inspect A B` renders every object it found in one JSON array
(docker/cli man/docker-inspect.1.md: "By default, this will render all results in a JSON
array") and exits 1 when any name is missing."""

import dataclasses
import json
from pathlib import Path

import pytest

from k3deploy.facts import docker
from k3deploy.facts.docker import GO_ZERO_TIME, Container, parse_inspect
from k3deploy.remote import guard

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "docker"
ID = "e575172ed11dc01bfce087fb27bee502db149e1a0fad7c296ad300bbff178148"
IMAGE_ID = "sha256:2b8fd9751c4c0f5dd266fcae00707e67a2545ef34f9a29354585f93dac906749"
CMD = ("python3", "-m", "sglang.launch_server")
LABELS = {"k3deploy.config": "0123abcd"}


def raw(name: str) -> str:
    path = REAL / name
    assert Path(f"{path}.source").is_file(), f"{path} has no .source beside it"
    return path.read_text()


def engine(status, running, code, started, finished) -> Container:
    return Container(id=ID, status=status, running=running, exit_code=code, started=started,
                     finished=finished, image="lmsysorg/sglang:kimi-k3", image_id=IMAGE_ID,
                     labels=LABELS, cmd=CMD)


@pytest.mark.parametrize("name, want", [
    ("28.5.1/container-inspect-running.json",
     engine("running", True, 0, "2020-01-06T09:06:59.461876391Z", GO_ZERO_TIME)),
    ("28.5.1/container-inspect-exited-trimmed.json",
     engine("exited", False, 137, "2020-01-06T09:06:59.46187639Z", "2020-01-06T09:07:59.4618Z")),
    ("28.5.1/container-inspect-never-started.json",
     engine("created", False, 128, GO_ZERO_TIME, GO_ZERO_TIME)),
])
def test_each_real_container_document_is_its_typed_container(name, want):
    assert parse_inspect(raw(name)) == want


def test_the_engine_probe_finds_the_container_among_the_images_it_asked_alongside():
    container = json.loads(raw("28.5.1/container-inspect-running.json"))
    image = json.loads(raw("28.5.1/image-inspect-legacy-tag.json"))
    probe = docker.container_probe("k3", ["busybox:latest", "lmsysorg/sglang:kimi-k3-cu12"])
    assert probe.script == ("docker inspect k3 busybox:latest lmsysorg/sglang:kimi-k3-cu12 "
                            "2>/dev/null") and probe.sudo
    # exit 1: the cu12 tag is missing; the container is in the answer all the same
    found = probe.parse(json.dumps(image + container), 1)
    assert found is not None and found.id == ID and found.running
    assert probe.parse(json.dumps(image), 1) is None            # only the image: no container


def test_no_container_is_none():
    # docker inspect of a missing container: `[]` on stdout, "Error: No such object" on stderr
    assert parse_inspect("[]\n") is None
    assert parse_inspect("") is None and parse_inspect("not json") is None
    assert parse_inspect('{"State": {}}') is None                  # not a list: not inspect's


def test_a_field_that_is_not_the_containers_fails():
    found = parse_inspect(raw("28.5.1/container-inspect-running.json"))
    with pytest.raises(AttributeError):
        found.Running   # noqa: B018  (the document's key, not the record's field)
    with pytest.raises(TypeError, match="runing"):
        dataclasses.replace(found, runing=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        found.running = False


def test_the_status_document_keeps_the_containers_fields():
    found = parse_inspect(raw("28.5.1/container-inspect-exited-trimmed.json"))
    assert docker.summary(found) == {
        "id": ID, "status": "exited", "running": False, "exit_code": 137,
        "image": "lmsysorg/sglang:kimi-k3", "labels": LABELS, "cmd": list(CMD),
        "started": "2020-01-06T09:06:59.46187639Z", "finished": "2020-01-06T09:07:59.4618Z"}
    assert docker.summary(None) is None


# -- the guard's half: the same records ---------------------------------------------------
def test_a_running_engine_is_running():
    info = guard.parse_inspect(raw("28.5.1/container-inspect-running.json"))
    assert guard.engine_state(info, info.id) == (True, None, None)


def test_an_exited_engine_gives_its_code_and_gos_trimmed_finish_time():
    info = guard.parse_inspect(raw("28.5.1/container-inspect-exited-trimmed.json"))
    assert guard.engine_state(info, info.id) == (False, 137, "2020-01-06T09:07:59.4618Z")


def test_a_container_that_never_started_exited_with_its_code_and_gos_zero_time():
    info = guard.parse_inspect(raw("28.5.1/container-inspect-never-started.json"))
    assert guard.engine_state(info, info.id) == (False, 128, GO_ZERO_TIME)


def test_another_container_under_the_name_or_none_is_not_the_watched_engine():
    info = guard.parse_inspect(raw("28.5.1/container-inspect-running.json"))
    assert guard.engine_state(info, "0" * 64) == (False, None, None)
    assert guard.parse_inspect("[]\n") is None
    assert guard.engine_state(None, info.id) == (False, None, None)


def test_the_guard_ships_the_parser_it_imports():
    from k3deploy.node.guard_config import SCRIPTS
    assert "docker_inspect.py" in SCRIPTS
    assert guard.parse_inspect.__module__ == "docker_inspect"   # the sibling file, as on a node

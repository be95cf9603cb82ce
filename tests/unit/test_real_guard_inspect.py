"""The guard's reading of `docker inspect` (remote/guard.py), from real outputs: raw text in,
the engine's state out (tests/fixtures/real/docker/28.5.1/, each with its .source)."""

from pathlib import Path

from k3deploy.remote.guard import engine_state, parse_inspect

DOCKER = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "docker" / "28.5.1"


def raw(name: str) -> str:
    path = DOCKER / name
    assert Path(f"{path}.source").is_file(), f"{path} has no .source beside it"
    return path.read_text()


def test_a_running_engine_is_running():
    info = parse_inspect(raw("container-inspect-running.json"), 0)
    assert engine_state(info, info["Id"]) == (True, None, None)


def test_an_exited_engine_gives_its_code_and_gos_trimmed_finish_time():
    info = parse_inspect(raw("container-inspect-exited-trimmed.json"), 0)
    assert engine_state(info, info["Id"]) == (False, 137, "2020-01-06T09:07:59.4618Z")


def test_a_container_that_never_started_exited_with_its_code_and_gos_zero_time():
    info = parse_inspect(raw("container-inspect-never-started.json"), 0)
    assert engine_state(info, info["Id"]) == (False, 128, "0001-01-01T00:00:00Z")


def test_another_container_under_the_name_or_none_is_not_the_watched_engine():
    info = parse_inspect(raw("container-inspect-running.json"), 0)
    assert engine_state(info, "0" * 64) == (False, None, None)
    # docker inspect of a missing container: `[]` on stdout, exit 1
    assert parse_inspect("[]\n", 1) is None and parse_inspect("not json", 0) is None
    assert engine_state(None, info["Id"]) == (False, None, None)

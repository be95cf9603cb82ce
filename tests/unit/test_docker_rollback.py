"""A docker start that fails after nvme wrote daemon.json is rolled back (steps/disks/docker_rollback.py):
dockerd's error line read from the journal, the previous daemon.json back, docker started past
its start limit, the step failed naming the node, the step and dockerd's words."""

from pathlib import Path

import pytest
from test_step_plans import node_ctx, nvme_facts

from k3deploy.core.errors import StepFailed
from k3deploy.steps.disks import docker_rollback as R
from k3deploy.steps.disks.nvme import MoveToNvme

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
DTYPE = (REAL / "docker" / "28.5.1" / "journal-start-no-dtype.txt").read_text()
DTYPE_LINE = DTYPE.splitlines()[3].split("]: ", 1)[1]
MOVING = {"daemon_json": {"settings": {"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}},
          "daemon_json_present": True, "docker_root": "/var/lib/docker"}


def test_dockerd_error_is_its_bare_line_not_its_log_lines_or_systemds():
    assert R.dockerd_error(DTYPE) == DTYPE_LINE
    assert DTYPE_LINE.startswith("failed to start daemon: error initializing graphdriver: overlay2")
    old = (REAL / "systemd" / "232" / "journal-xe-docker-bare-error.txt").read_text()
    assert R.dockerd_error(old) == ("`docker daemon` is not supported on Linux. Please run "
                                    "`dockerd` directly")


def test_a_journal_of_systemd_lines_only_names_no_dockerd_error():
    limited = (REAL / "systemd" / "249" / "journal-xeu-docker-start-limit.txt").read_text()
    assert R.dockerd_error(limited) is None
    assert R.dockerd_error(None) is None


def test_nvme_keeps_the_previous_daemon_json_before_it_writes_the_new_one(tmp_path):
    actions = MoveToNvme().plan(nvme_facts(**MOVING), node_ctx(tmp_path))
    assert [a.argv for a in actions[:1]] == [("cp", "-p", R.DAEMON_JSON, R.PREVIOUS)]
    assert actions[1].upload_to == R.DAEMON_JSON
    assert [a.tag for a in actions if a.tag] == [R.BACKUP, R.START]
    absent = MoveToNvme().plan(nvme_facts(**{**MOVING, "daemon_json": {},
                                             "daemon_json_present": False}), node_ctx(tmp_path))
    assert absent[0].upload_to == R.DAEMON_JSON


class StartFails:
    """`systemctl start docker` fails `fails` times; the journal holds dockerd's error."""

    def __init__(self, fails=1, journal=DTYPE):
        self.fails, self.journal, self.active = fails, journal, True

    def __call__(self, command):
        if command == "systemctl start docker":
            self.active = self.fails <= 0
            self.fails -= 1
            return (0, "") if self.active else (1, "Job for docker.service failed because the "
                                                   "control process exited with error code.")
        if command.startswith("journalctl"):
            return 0, self.journal
        if command == "systemctl is-active docker":
            return (0, "active") if self.active else (3, "failed")
        return 0, ""


def rolled_back(tmp_path, facts, answers):
    ctx = node_ctx(tmp_path)
    ctx.conn.respond = answers
    step = MoveToNvme()
    with pytest.raises(StepFailed) as err:
        step.apply(ctx, step.plan(facts, ctx))
    return ctx.conn.commands, err.value


def test_a_refused_start_puts_the_previous_file_back_and_docker_runs(tmp_path):
    commands, err = rolled_back(tmp_path, nvme_facts(**MOVING), StartFails(1))
    after = commands[commands.index("systemctl start docker") + 1:]
    assert after == ["journalctl -u docker -n 30 --no-pager",
                     f"mv -f {R.DAEMON_JSON} {R.FAILED}", f"mv -f {R.PREVIOUS} {R.DAEMON_JSON}",
                     "systemctl reset-failed docker.service docker.socket",
                     "systemctl start docker", "systemctl is-active docker"]
    text = "\n".join(err.lines())
    assert err.node == "node0" and err.step == "nvme"
    for part in (DTYPE_LINE, "/mnt/nvme/docker", "put back the previous", R.FAILED,
                 "docker runs again with its old data-root", "ftype=1"):
        assert part in text, text
    assert "DOWN" not in text


def test_without_a_previous_file_the_refused_one_goes_aside_and_none_comes_back(tmp_path):
    facts = nvme_facts(**{**MOVING, "daemon_json": {}, "daemon_json_present": False})
    commands, err = rolled_back(tmp_path, facts, StartFails(1))
    assert f"mv -f {R.DAEMON_JSON} {R.FAILED}" in commands
    assert not any(R.PREVIOUS in c for c in commands)
    assert "there was none before" in str(err)


def test_a_second_refusal_says_docker_is_down_and_how_to_start_it(tmp_path):
    commands, err = rolled_back(tmp_path, nvme_facts(**MOVING), StartFails(2))
    assert commands[-1] == "systemctl is-active docker"
    text = "\n".join(err.lines())
    assert "docker is DOWN" in text and "systemctl reset-failed docker" in err.hint, text


def test_a_restart_without_a_new_daemon_json_leaves_the_users_file_alone(tmp_path):
    facts = nvme_facts(docker_root="/var/lib/docker", daemon_json_present=True)
    unknown = DTYPE.replace(DTYPE_LINE, "unable to configure the Docker daemon with file "
                            "/etc/docker/daemon.json: the following directives don't match any "
                            "configuration option: gpus")
    commands, err = rolled_back(tmp_path, facts, StartFails(2, unknown))
    assert not any(c.startswith("mv ") or c.startswith("cp ") for c in commands), commands
    assert "did not change it" in str(err) and "gpus" in str(err)
    assert "remove the key dockerd names" in err.hint

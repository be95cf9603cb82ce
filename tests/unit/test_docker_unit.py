"""nvme reads dockerd's flags from the unit before it writes daemon.json (steps/disks/docker_unit.py)."""

from pathlib import Path

import pytest
from test_step_plans import daemon_json, node_ctx, nvme_facts

from k3deploy.core.errors import StepFailed
from k3deploy.steps.disks import docker_unit
from k3deploy.steps.disks.nvme import MoveToNvme

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "systemd" / "252"
CAT = (REAL / "cat-docker-dropin-data-root.txt").read_text()
DROPIN = "/etc/systemd/system/docker.service.d/data-root.conf"


def test_the_flag_is_found_in_the_drop_in_that_sets_it():
    assert docker_unit.data_root_flag(CAT) == (DROPIN, "--data-root=/data/docker", "/data/docker")


def test_the_shipped_unit_alone_and_a_cleared_exec_start_give_no_flag():
    shipped = CAT.split("\n# /etc/")[0]
    assert docker_unit.data_root_flag(shipped) is None
    cleared = CAT + "\n# /etc/systemd/system/docker.service.d/zz.conf\n[Service]\nExecStart=\n" \
        "ExecStart=/usr/bin/dockerd -H fd://\n"
    assert docker_unit.data_root_flag(cleared) is None
    assert docker_unit.data_root_flag(None) is None


def test_nvme_refuses_before_touching_daemon_json_or_docker(tmp_path):
    facts = nvme_facts(daemon_json=daemon_json(log_driver="json-file"), docker_unit=CAT,
                       docker_root="/data/docker")
    with pytest.raises(StepFailed) as err:
        MoveToNvme().plan(facts, node_ctx(tmp_path))
    text = str(err.value) + err.value.hint
    assert err.value.node == "node0" or "node0" in text
    for part in ("--data-root=/data/docker", DROPIN, "docker keeps running",
                 "specified both as a flag and in the configuration file", "daemon-reload"):
        assert part in text


def test_a_flag_already_on_the_nvme_keeps_data_root_out_of_daemon_json(tmp_path):
    on_nvme = CAT.replace("/data/docker", "/mnt/nvme/docker")
    facts = nvme_facts(daemon_json=daemon_json(log_driver="json-file"), docker_unit=on_nvme)
    assert MoveToNvme().plan(facts, node_ctx(tmp_path)) == []


def test_a_restart_clears_earlier_failed_starts_first(tmp_path):
    facts = nvme_facts(docker_root="/var/lib/docker")
    names = [a.description for a in MoveToNvme().plan(facts, node_ctx(tmp_path))]
    assert names == ["stop docker", "clear docker's failed starts", "start docker"]

"""The systemctl/dockerd stand-ins on the dockerd-flag-data-root profile: the unit's flag and
daemon.json's data-root together stop dockerd, and restarts in a row hit systemd's start limit
until reset-failed (scripts/tb/standins/tbstand/dockerunit.py cites upstream)."""

import pytest
import tbfixture  # noqa: F401  (puts scripts/ on sys.path)
from tb.profiles import PROFILES
from test_standins import Node

from k3deploy.steps.disks import docker_unit

PROFILE = PROFILES["dockerd-flag-data-root"].settings


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path)
    n.node_json(PROFILE)
    yield n
    n.kill_everything()


def test_the_flag_is_in_systemctl_cat_as_k3deploy_reads_it(node):
    text = node.systemctl("cat", "docker", check=0).stdout
    assert docker_unit.data_root_flag(text) == (
        "/etc/systemd/system/docker.service.d/data-root.conf", "--data-root /var/lib/docker-flag",
        "/var/lib/docker-flag")
    assert node.docker("info", "-f", "{{.DockerRootDir}}", check=0).stdout == "/var/lib/docker-flag\n"


def test_flag_and_file_refuse_to_start_and_restarts_hit_the_start_limit(node):
    (node.etc / "daemon.json").write_text('{"data-root": "/mnt/nvme/docker"}')
    r = node.systemctl("restart", "docker")
    assert r.returncode == 1 and "control process exited with error code" in r.stderr
    status = node.systemctl("status", "docker").stdout
    assert ("the following directives are specified both as a flag and in the configuration "
            "file: data-root: (from flag: /var/lib/docker-flag, from file: /mnt/nvme/docker)") in status
    (node.etc / "daemon.json").write_text("{}")     # fixed, but systemd's own restarts used the burst
    r = node.systemctl("start", "docker")
    assert r.returncode == 1 and "start of the service was attempted too often" in r.stderr
    node.systemctl("reset-failed", "docker", check=0)
    node.systemctl("start", "docker", check=0)
    assert node.docker("info", "-f", "{{.DockerRootDir}}", check=0).stdout == "/var/lib/docker-flag\n"


def test_three_good_restarts_in_a_minute_are_the_burst(node):
    for _ in range(3):
        node.systemctl("restart", "docker", check=0)
    r = node.systemctl("restart", "docker")
    assert r.returncode == 1 and "reset-failed docker.service" in r.stderr

"""The systemctl/dockerd/journalctl stand-ins on profile nvme-xfs-ftype0: overlay2 configured in
daemon.json and a data-root on the NVMe make dockerd exit 1 with moby v28.5.1's line, which
`journalctl -u docker` shows as a real journal does and k3deploy's parser reads
(tbstand/graphdriver.py and tbstand/journal.py cite upstream)."""

import json
from pathlib import Path

import pytest
import tbfixture  # noqa: F401  (puts scripts/ on sys.path)
from tb.profiles import PROFILES
from test_standins import Node

from k3deploy.steps.disks import docker_rollback

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
REAL_JOURNAL = (REAL / "docker" / "28.5.1" / "journal-start-no-dtype.txt").read_text()


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path)
    n.node_json(PROFILES["nvme-xfs-ftype0"].settings)
    yield n
    n.kill_everything()


def shape(line):
    """A journal line without what changes between runs: date, time, host, pid, logrus time."""
    line = line.split(" ", 4)[4]
    return line.split("[")[0] + ": " + line.split("]: ", 1)[1].split(" level=")[-1]


def test_overlay2_on_the_ftype0_nvme_is_refused_with_moby_s_line(node):
    (node.etc / "daemon.json").write_text(json.dumps({"storage-driver": "overlay2",
                                                      "data-root": "/mnt/nvme/docker"}))
    r = node.systemctl("restart", "docker")
    assert r.returncode == 1 and "control process exited with error code" in r.stderr
    assert node.systemctl("is-active", "docker").stdout.strip() == "failed"
    journal = node.sh("journalctl", "-u", "docker", "-n", "30", "--no-pager", check=0).stdout
    said = docker_rollback.dockerd_error(journal)
    assert said == docker_rollback.dockerd_error(REAL_JOURNAL), journal
    real = [shape(x) for x in REAL_JOURNAL.splitlines() if "graphdriver] trying" not in x]
    first = [shape(x) for x in journal.splitlines()]
    start = first.index(real[0])
    assert first[start:start + len(real)] == real, journal
    assert "Start request repeated too quickly." in journal   # systemd's own restarts, then the limit


def test_without_a_configured_driver_or_off_the_nvme_dockerd_starts(node):
    (node.etc / "daemon.json").write_text(json.dumps({"data-root": "/mnt/nvme/docker"}))
    node.systemctl("restart", "docker", check=0)
    (node.etc / "daemon.json").write_text(json.dumps({"storage-driver": "overlay2"}))
    node.systemctl("restart", "docker", check=0)
    assert node.docker("info", "-f", "{{.DockerRootDir}}", check=0).stdout == "/var/lib/docker\n"
    journal = node.sh("journalctl", "-u", "docker", check=0).stdout
    assert docker_rollback.dockerd_error(journal) is None, journal
    assert node.sh("journalctl", "-u", "ssh", check=0).stdout == "-- No entries --\n"

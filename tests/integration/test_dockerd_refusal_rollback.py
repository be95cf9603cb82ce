"""A node whose NVMe is xfs with ftype=0 (profile nvme-xfs-ftype0) and whose daemon.json names
overlay2: dockerd refuses the NVMe data-root. nvme puts the previous daemon.json back and docker
runs again with its old data-root; the error names the node, the step and dockerd's own line.
Once the filesystem is fixed, the re-run moves data-root. Needs root (the testbed)."""

from __future__ import annotations

import json
import os

import pytest
from failure_report import run, said
from tbfixture import testbed
from test_dockerd_unit_flag import nvme_only

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="the testbed needs root")]
DTYPE_LINE = ("failed to start daemon: error initializing graphdriver: overlay2: the backing xfs "
              "filesystem is formatted without d_type support")
OVERLAY2 = json.dumps({"storage-driver": "overlay2"})


def node_file(tb, path):
    return tb.ssh("node0", ["cat", path]).stdout


def test_a_refused_data_root_leaves_docker_running_on_the_old_one(tmp_path):
    with testbed(tmp_path, nodes=1, profile="nvme-xfs-ftype0",
                 overrides={"node0": {"daemon_json": OVERLAY2}}) as tb:
        inv, book = str(tb.inventory), nvme_only(tmp_path)
        refused = run("run", book, "-i", inv)
        assert refused.returncode == 1, said(refused)
        for part in ("node0", "nvme", DTYPE_LINE, "/mnt/nvme/docker", "daemon.json.k3deploy-failed",
                     "ftype=1"):
            assert part in said(refused), said(refused)
        assert tb.ssh("node0", ["systemctl", "is-active", "docker"]).stdout.strip() == "active"
        root = tb.ssh("node0", ["docker", "info", "-f", "{{.DockerRootDir}}"]).stdout.strip()
        assert root == "/var/lib/docker", root
        restored = json.loads(node_file(tb, "/etc/docker/daemon.json"))
        assert "data-root" not in restored and restored["storage-driver"] == "overlay2", restored
        kept = json.loads(node_file(tb, "/etc/docker/daemon.json.k3deploy-failed"))
        assert kept["data-root"] == "/mnt/nvme/docker", kept
        fix = ("import json; p='/run/k3tb/node.json'; d=json.load(open(p)); "
               "d['no_dtype_under']=None; json.dump(d, open(p, 'w'))")   # reformatted, ftype=1
        assert tb.ssh("node0", ["python3", "-c", fix]).returncode == 0
        moved = run("run", book, "-i", inv)
        assert moved.returncode == 0, said(moved)
        root = tb.ssh("node0", ["docker", "info", "-f", "{{.DockerRootDir}}"]).stdout.strip()
        assert root == "/mnt/nvme/docker", root

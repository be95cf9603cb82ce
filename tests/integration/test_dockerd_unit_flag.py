"""A node whose docker.service gives dockerd --data-root (profile dockerd-flag-data-root):
nvme refuses before it writes daemon.json, naming the node, the unit file and the flag, and
docker keeps running; once the flag is gone (the user's fix), nvme moves data-root to the NVMe
and restarts docker through reset-failed. Needs root (the testbed)."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from failure_report import run, said
from tbfixture import testbed

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="the testbed needs root")]
DROPIN = "/etc/systemd/system/docker.service.d/data-root.conf"


def nvme_only(tmp_path):
    path = tmp_path / "nvme.yaml"
    path.write_text(yaml.safe_dump({"name": "nvme", "description": "nvme only",
                                    "steps": ["nvme"]}))
    return str(path)


def test_the_unit_flag_is_refused_first_and_docker_keeps_running(tmp_path):
    with testbed(tmp_path, nodes=1, profile="dockerd-flag-data-root") as tb:
        inv, book = str(tb.inventory), nvme_only(tmp_path)
        refused = run("run", book, "-i", inv)
        assert refused.returncode == 1, said(refused)
        for part in ("node0", DROPIN, "--data-root /var/lib/docker-flag", "docker keeps running"):
            assert part in said(refused), said(refused)
        assert tb.ssh("node0", ["systemctl", "is-active", "docker"]).stdout.strip() == "active"
        daemon_json = tb.ssh("node0", ["cat", "/etc/docker/daemon.json"]).stdout   # the toolkit's
        assert "data-root" not in json.loads(daemon_json or "{}"), daemon_json
        fix = ("import json; p='/run/k3tb/node.json'; d=json.load(open(p)); "
               "d['dockerd_flags']=[]; json.dump(d, open(p, 'w'))")
        assert tb.ssh("node0", ["python3", "-c", fix]).returncode == 0
        moved = run("run", book, "-i", inv)
        assert moved.returncode == 0, said(moved)
        root = tb.ssh("node0", ["docker", "info", "-f", "{{.DockerRootDir}}"]).stdout.strip()
        assert root.endswith("/docker") and root.startswith("/mnt/"), root
        calls = [c["argv"] for c in tb.stats()["nodes"]["node0"]["calls"] if c["tool"] == "systemctl"]
        assert ["systemctl", "reset-failed", "docker.service", "docker.socket"] in calls, calls

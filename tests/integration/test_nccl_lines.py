"""NCCL's lines reach k3deploy whatever the engine's stdout does. The stand-in engines write
them as NCCL does (scripts/tb/standins/engine/ncclout.py): into NCCL_DEBUG_FILE, else to a
block-buffered stdout that `docker logs` sees only when the process exits (NVIDIA/nccl#1841).
So `docker logs` of a serving engine holds none of them, and `status`, verify and the
certificate still name every rank's transport and devices from the per-rank files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tbfixture import testbed

from k3run import k3, out

pytestmark = pytest.mark.integration

IB_DEVICES = [f"mlx5_{i}:1/IB" for i in range(8)]
NCCL_LOGS = "/mnt/nvme/.k3deploy/nccl-logs"


def _certificate(up) -> dict:
    return json.loads(Path(re.search(r"certificate: (\S+\.json)", out(up)).group(1)).read_text())


def _engine_log(tb, node: str) -> str:
    name = (yaml.safe_load(Path(tb.inventory).read_text()).get("engine") or {}).get("container", "k3")
    return tb.ssh(node, ["docker", "logs", name]).stdout


def _set_engine_env(tb, **env: str) -> None:
    doc = yaml.safe_load(Path(tb.inventory).read_text())
    doc.setdefault("engine", {}).setdefault("env", {}).update(env)
    Path(tb.inventory).write_text(yaml.safe_dump(doc, sort_keys=False))


def test_every_rank_reports_ib_from_its_nccl_files_not_docker_logs(tmp_path):
    with testbed(tmp_path, nodes=2, gpu="h200", profile="ib-hcas") as tb:
        up = k3("up", "-i", str(tb.inventory), "--no-dry-fire")
        assert up.returncode == 0, out(up)
        assert f"NCCL transport: IB over {', '.join(IB_DEVICES)}" in out(up)
        for node in tb.nodes:
            assert "NCCL INFO" not in _engine_log(tb, node), node   # held in stdout's block
            files = tb.ssh(node, ["sh", "-c", f"cat {NCCL_LOGS}/*.log"]).stdout
            assert "NCCL INFO Using network IB" in files, node
        cert = _certificate(up)
        for node in tb.nodes:
            nccl = cert["verify"][node]["detail"]["certificate"]["nccl"]
            assert (nccl["transport"], nccl["devices"]) == ("IB", IB_DEVICES), node
            assert nccl["gpudirect"] is True   # the channel line via NET/IB/0/GDRDMA
        doc = json.loads(k3("status", "-i", str(tb.inventory), "--json").stdout)
        assert doc["cluster"]["nccl_transport"] == "IB" and doc["cluster"]["fabric_warning"] is None
        for node in tb.nodes:
            assert doc["nodes"][node]["live"]["fabric"]["nccl_devices"] == IB_DEVICES, node
        logs = k3("logs", "-i", str(tb.inventory), "--out", str(tmp_path / "logs"))
        assert logs.returncode == 0, out(logs)
        for rank, node in enumerate(tb.nodes):
            saved = (tmp_path / "logs" / f"{node}-rank{rank}-nccl.log").read_text()
            assert "NCCL INFO Using network IB" in saved, node


def test_sockets_with_hcas_warn_when_the_engines_fell_back(tmp_path):
    """NCCL_IB_DISABLE=1 (as guides copied into engine.env set it): every rank on sockets while
    the nodes have HCAs; the lines are in the files only, and the warning fires."""
    with testbed(tmp_path, nodes=2, gpu="h200", profile="ib-hcas") as tb:
        _set_engine_env(tb, NCCL_IB_DISABLE="1")
        up = k3("up", "-i", str(tb.inventory), "--no-dry-fire")
        assert up.returncode == 0, out(up)
        assert "warning: NCCL uses sockets while node0, node1 have HCAs" in out(up)
        assert all("NCCL INFO" not in _engine_log(tb, n) for n in tb.nodes)
        doc = json.loads(k3("status", "-i", str(tb.inventory), "--json").stdout)
        assert doc["cluster"]["nccl_transport"] == "Socket"
        assert "node0, node1 have HCAs" in doc["cluster"]["fabric_warning"]
        for node in tb.nodes:
            assert doc["nodes"][node]["live"]["fabric"]["nccl_devices"] == ["eth0"], node

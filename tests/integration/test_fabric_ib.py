"""The fabric reaches the engine: on `--profile ib-hcas` every engine `docker run` passes
/dev/infiniband, IPC_LOCK and NCCL_IB_HCA, and `status --json` reports NCCL's transport IB
(read from the stand-in engine's NCCL init lines); on the default testbed it says Socket.
Preflight reads each node's GPU-to-HCA layout from `nvidia-smi topo -m` before the launch (the
stand-in prints the sourced transcript of an 8x H100 node with eight HCAs, or of one without)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tbfixture import testbed

from k3run import k3, out, state

pytestmark = pytest.mark.integration


def _runs(tb) -> dict[str, list[str]]:
    stats = tb.stats()
    return {n: c["argv"] for n, rec in stats["nodes"].items() for c in rec["calls"]
            if c["tool"] == "docker" and c["argv"][1:2] == ["run"]}


HCAS = [f"mlx5_{i}" for i in range(8)]
IB_DEVICES = [f"{h}:1/IB" for h in HCAS]


def _gpu_nic(tb, node: str):
    """The node's layout as preflight kept it on the head (asked before the launch)."""
    return state(tb.inventory, "node0")["steps"]["preflight"]["detail"]["gpu_nic"][node]


def test_ib_hcas_reach_every_rank_and_status_says_ib(tmp_path):
    with testbed(tmp_path, nodes=4, profile="ib-hcas") as tb:
        up = k3("up", "-i", str(tb.inventory))
        assert up.returncode == 0, out(up)
        assert f"NCCL transport: IB over {', '.join(IB_DEVICES)}" in out(up)
        assert "GPU-to-HCA" not in out(up) and "nearest HCA" not in out(up)
        assert {n: _gpu_nic(tb, n) for n in tb.nodes} == {
            n: "8 HCAs, nearest: 8 GPUs PIX" for n in tb.nodes}
        cert = json.loads(Path(re.search(r"certificate: (\S+\.json)", out(up)).group(1)).read_text())
        assert '"transport": "IB"' in json.dumps(cert)
        runs = _runs(tb)
        assert sorted(runs) == tb.nodes
        for node, argv in runs.items():
            i = argv.index("--device")
            assert argv[i + 1] == "/dev/infiniband", node
            assert argv[argv.index("--cap-add") + 1] == "IPC_LOCK", node
            assert f"NCCL_IB_HCA=={','.join(HCAS)}" in argv and "NCCL_DEBUG=INFO" in argv, node
        status = k3("status", "-i", str(tb.inventory), "--json")
        doc = json.loads(status.stdout)
        assert doc["cluster"]["nccl_transport"] == "IB", status.stdout[-2000:]
        assert doc["cluster"]["fabric_warning"] is None
        head = doc["nodes"]["node0"]["live"]["fabric"]
        assert head["nccl_devices"] == IB_DEVICES


def test_one_node_without_hcas_is_socket_and_no_warning(tmp_path):
    with testbed(tmp_path, nodes=1, gpu="b300") as tb:
        up = k3("up", "-i", str(tb.inventory))
        assert up.returncode == 0, out(up)
        argv = _runs(tb)["node0"]
        assert "--device" not in argv and "NCCL_DEBUG=INFO" in argv
        assert _gpu_nic(tb, "node0") == "8 GPUs, no NIC"
        doc = json.loads(k3("status", "-i", str(tb.inventory), "--json").stdout)
        assert doc["cluster"]["nccl_transport"] == "Socket"
        assert doc["cluster"]["fabric_warning"] is None
        assert doc["nodes"]["node0"]["live"]["fabric"]["nccl_devices"] == ["eth0"]

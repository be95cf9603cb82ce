"""NCCL_IB_HCA on a node with InfiniBand HCAs beside up Ethernet ports whose names share
prefixes (profile ib-hcas-eth-frontend: the 8x H100 node of kvcache-ai/Mooncake#2039). The
launch names the eight InfiniBand HCAs exactly ("=": NCCL matches each entry as a prefix
otherwise), preflight names each node's mixed ports, and NCCL (the stand-in matches
NCCL_IB_HCA as src/misc/utils.cc does) runs over the InfiniBand ones only."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tbfixture import testbed

from k3run import k3, out

pytestmark = pytest.mark.integration

IB = ["mlx5_0", "mlx5_10", "mlx5_11", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9"]


def _runs(tb) -> dict[str, list[str]]:
    return {n: c["argv"] for n, rec in tb.stats()["nodes"].items() for c in rec["calls"]
            if c["tool"] == "docker" and c["argv"][1:2] == ["run"]}


def test_exact_ib_hcas_of_one_link_layer_and_a_warning_naming_the_mixed_ports(tmp_path):
    with testbed(tmp_path, nodes=2, gpu="h200", profile="ib-hcas-eth-frontend") as tb:
        up = k3("up", "-i", str(tb.inventory), "--no-dry-fire")
        assert up.returncode == 0, out(up)
        for node in tb.nodes:
            assert (f"warning: {node}'s active ports mix link layers (InfiniBand mlx5_0:1, "
                    in out(up)), node
        assert "Ethernet mlx5_7:1, mlx5_8:1" in out(up)
        for node, argv in _runs(tb).items():
            assert f"NCCL_IB_HCA={'=' + ','.join(IB)}" in argv, node
        used = sorted(f"{h}:1/IB" for h in IB)
        assert f"NCCL transport: IB over {', '.join(used)}" in out(up)


def test_a_prefix_list_that_reaches_the_ethernet_ports_fails_as_nccl_does(tmp_path):
    """engine.env NCCL_IB_HCA=mlx5 (a prefix: every port, as the vLLM docs' example writes it):
    NCCL gets both link layers and its connect fails; the launch names the rank and NCCL's
    own line."""
    with testbed(tmp_path, nodes=2, gpu="h200", profile="ib-hcas-eth-frontend") as tb:
        doc = yaml.safe_load(Path(tb.inventory).read_text())
        doc.setdefault("engine", {}).setdefault("env", {})["NCCL_IB_HCA"] = "mlx5"
        Path(tb.inventory).write_text(yaml.safe_dump(doc, sort_keys=False))
        up = k3("up", "-i", str(tb.inventory), "--no-dry-fire")
        assert up.returncode == 1, out(up)
        assert "Attempted to connect incompatible devices" in out(up)

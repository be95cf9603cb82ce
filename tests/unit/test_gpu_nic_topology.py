"""`nvidia-smi topo -m` -> each GPU's nearest HCA, from real transcripts
(tests/fixtures/real/nvidia-smi/<driver>/topo-m-*.txt, each with its .source); then
preflight's warnings from those facts (steps/fabric/fabric_topology.py)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace as NS

import pytest

from k3deploy.facts import fabric
from k3deploy.facts.topology import GpuNic, Topology, parse_topology
from k3deploy.steps.fabric import fabric_check, fabric_topology
from k3deploy.steps.checks.preflight import PreflightFacts
from tests.realfix import real
from tests.unit.preflight_facts import preflight_facts

H100_8HCA = "570.133.20/topo-m-h100-8x-8hca"
A100_10NIC = "525.105.17/topo-m-a100-8x-10nic"
DGX1_NO_LEGEND = "unknown/topo-m-dgx1-v100-8x-4hca-no-legend"
P5_NO_HCA = "unknown/topo-m-h100-8x-p5-no-hca"


def topo(name: str) -> Topology:
    parsed = parse_topology(real(f"nvidia-smi/{name}.txt"), 0)
    assert parsed is not None
    return parsed


def hca_facts(name: str | None, hcas: int = 8, peermem: bool = True) -> PreflightFacts:
    """A node's preflight facts: `hcas` active ports in sysfs and the topology transcript."""
    ports = tuple(fabric.IbPort(f"mlx5_{i}", 1, "ACTIVE", 400.0, "InfiniBand") for i in range(hcas))
    return preflight_facts(ib_ports=ports, ib_devices=("uverbs0",), gpudirect_rdma=peermem,
                           gpu_nic_topology=topo(name) if name else None)


def test_nic_legend_names_the_hcas_and_each_gpu_has_its_pix_hca():
    t = topo(H100_8HCA)
    assert t.gpus == tuple(range(8))
    assert t.nics == tuple(f"mlx5_{i}" for i in range(8))
    assert t.nearest == tuple(GpuNic(i, (f"mlx5_{i}",), "PIX") for i in range(8))


def test_tab_separated_transcript_with_two_hcas_per_gpu_pair():
    t = topo(A100_10NIC)
    assert len(t.nics) == 10 and t.nics[-1] == "mlx5_9"
    assert t.nearest[0] == GpuNic(0, ("mlx5_0", "mlx5_1"), "PXB")
    assert t.nearest[7] == GpuNic(7, ("mlx5_6", "mlx5_7"), "PXB")
    # mlx5_8/9 are SYS from every GPU: never anyone's nearest
    assert not {"mlx5_8", "mlx5_9"} & {n for g in t.nearest for n in g.nics}


def test_older_driver_names_the_hcas_in_the_header():
    t = topo(DGX1_NO_LEGEND)
    assert t.nics == ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")
    assert [(g.gpu, g.nics, g.path) for g in t.nearest[::2]] == [
        (0, ("mlx5_0",), "PIX"), (2, ("mlx5_1",), "PIX"), (4, ("mlx5_2",), "PIX"),
        (6, ("mlx5_3",), "PIX")]


def test_node_without_hcas_has_gpus_and_no_nic():
    t = topo(P5_NO_HCA)
    assert t.gpus == tuple(range(8)) and t.nics == () and t.nearest == ()


@pytest.mark.parametrize("out, code", [("", 0), ("No devices were found\n", 6),
                                       (real(f"nvidia-smi/{H100_8HCA}.txt"), 9)])
def test_failure_or_no_matrix_is_no_fact(out, code):
    assert parse_topology(out, code) is None


# ------------------------------------------------------------------ preflight's warnings

def run(mode="auto"):
    return NS(inv=NS(engine=NS(fabric=mode)))


def test_cluster_of_like_nodes_with_pix_hcas_warns_nothing():
    nodes = {f"node{i}": hca_facts(H100_8HCA) for i in range(4)}
    assert fabric_check.warnings(nodes, run()) == []


def test_gpu_whose_nearest_hca_is_across_the_sockets_is_named_with_the_hca():
    t = topo(H100_8HCA)
    far = replace(t, nearest=t.nearest[:4] + tuple(GpuNic(g, ("mlx5_3",), "SYS") for g in (4, 5)))
    [line] = fabric_topology.node_warnings("node2", far, ("mlx5_0",))
    assert line.startswith("warning: node2: GPU4, GPU5 reach their nearest HCA (mlx5_3) only "
                           "across the CPU interconnect (SYS)")
    assert "GPUDirect RDMA off" in line and "seat an HCA" in line


def test_hcas_in_sysfs_but_none_in_topo_is_a_warning():
    [line] = fabric_topology.warnings({"node0": hca_facts(P5_NO_HCA, hcas=2)})
    assert line.startswith("warning: node0 has HCAs (mlx5_0, mlx5_1) but `nvidia-smi topo -m` "
                           "shows no NIC")
    # without HCAs, or without the fact (nvidia-smi failed), nothing is said
    assert fabric_topology.warnings({"node0": hca_facts(P5_NO_HCA, hcas=0)}) == []
    assert fabric_topology.warnings({"node0": hca_facts(None)}) == []


def test_the_node_laid_out_unlike_the_majority_is_named():
    nodes = {"node0": hca_facts(H100_8HCA), "node1": hca_facts(H100_8HCA),
             "node2": hca_facts(A100_10NIC, hcas=10)}
    [line] = fabric_check.warnings(nodes, run())
    assert line.startswith("warning: the GPU-to-HCA topology of node2 differs from the other "
                           "nodes' (node2: 10 HCAs, nearest: 8 GPUs PXB; the others: 8 HCAs, "
                           "nearest: 8 GPUs PIX)")


def test_two_nodes_that_differ_are_both_listed_and_none_blamed():
    nodes = {"node0": hca_facts(H100_8HCA), "node1": hca_facts(DGX1_NO_LEGEND, hcas=4)}
    [line] = fabric_topology.warnings(nodes)
    assert "node0: 8 HCAs, nearest: 8 GPUs PIX; node1: 4 HCAs, nearest: 8 GPUs PIX" in line
    assert "no majority says which is usual" in line


def test_socket_fabric_skips_the_topology():
    nodes = {"node0": hca_facts(H100_8HCA), "node1": hca_facts(P5_NO_HCA)}
    assert fabric_check.warnings(nodes, run("socket")) == []

"""NCCL_IB_HCA as the guides write it: "="-exact, the devices of one link layer, from the real
ports of an 8x H100 node with twelve HCAs (kvcache-ai/Mooncake#2039: eight InfiniBand
ConnectX-7 beside ConnectX-6 Ethernet ports, names sharing prefixes: mlx5_1 and mlx5_10);
preflight names a node whose active ports mix link layers."""

from __future__ import annotations

from k3deploy.engines import fabric as engine_fabric
from k3deploy.facts import fabric
from k3deploy.facts.topology import parse_topology
from k3deploy.steps.fabric import fabric_check
from tests.realfix import real
from tests.unit.preflight_facts import preflight_facts
from tests.unit.test_fabric_preflight import node as preflight_node

IB = ("mlx5_0", "mlx5_10", "mlx5_11", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9")


def twelve_nic_ports() -> tuple[fabric.IbPort, ...]:
    return fabric.parse_ports(real("linux-sysfs/6.x/ib-ports-h100-12nic-eth-frontend.txt"), 0)


def node(ports=None) -> fabric.NodeFabric:
    return fabric.NodeFabric(ports or twelve_nic_ports(), ("rdma_cm", "uverbs0"), True)


def test_every_active_port_would_mix_ib_and_ethernet_the_launch_keeps_ib_exactly():
    fab = node()
    assert set(fab.hcas) == set(IB) | {"mlx5_7", "mlx5_8"}     # ACTIVE of any link layer
    assert fab.active_by_layer["Ethernet"] == ("mlx5_7:1", "mlx5_8:1")
    assert fab.nccl_layer() == "InfiniBand" and fab.nccl_hcas() == IB
    hcas, disable = engine_fabric.choice("auto", fab)
    value = dict(engine_fabric.env(hcas, disable))["NCCL_IB_HCA"]
    assert value == "=" + ",".join(IB)


def test_the_nearest_hcas_layer_wins_else_the_majority_else_infiniband():
    def port(dev, layer):
        return fabric.IbPort(dev, 1, "ACTIVE", 100.0, layer)
    ports = (port("mlx5_0", "Ethernet"), port("mlx5_1", "Ethernet"), port("mlx5_2", "InfiniBand"))
    fab = node(ports)
    assert fab.nccl_hcas() == ("mlx5_0", "mlx5_1")                   # the majority
    assert fab.nccl_hcas(nearest=("mlx5_2",)) == ("mlx5_2",)         # nearest the GPUs
    tie = node((port("mlx5_0", "Ethernet"), port("mlx5_1", "InfiniBand")))
    assert tie.nccl_layer() == "InfiniBand"
    # a VPI card with one port of each layer is named by its port
    vpi = node((port("mlx5_0", "InfiniBand"), fabric.IbPort("mlx5_0", 2, "ACTIVE", 100.0, "Ethernet"),
                port("mlx5_1", "InfiniBand")))
    assert vpi.nccl_hcas() == ("mlx5_0:1", "mlx5_1")


def test_preflight_names_the_mixed_ports_and_leaves_the_other_layers_down_ports_alone():
    topo = parse_topology(real("nvidia-smi/unknown/topo-m-h100-8x-12nic.txt"), 0)
    found = preflight_facts(ib_ports=twelve_nic_ports(), ib_devices=("uverbs0",),
                            gpudirect_rdma=True, gpu_nic_topology=topo)
    lines = fabric_check.layer_warnings({"node0": found})
    assert len(lines) == 1
    assert lines[0].startswith("warning: node0's active ports mix link layers (InfiniBand mlx5_0:1, ")
    assert "Ethernet mlx5_7:1, mlx5_8:1" in lines[0] and "=mlx5_0,mlx5_10,mlx5_11," in lines[0]
    # GPU0 and GPU4 are PIX to Ethernet ports too, but most nearest ports are InfiniBand
    assert "nearest the GPUs" not in lines[0]
    problems = fabric_check.problems(found, preflight_node())
    assert not any("mlx5_1:1" in text or "mlx5_2:1" in text for _, text in problems)
    one = node((fabric.IbPort("mlx5_0", 1, "ACTIVE", 400.0, "InfiniBand"),))
    assert fabric_check.layer_warnings({"n": preflight_facts(
        ib_ports=one.ports, ib_devices=("uverbs0",), gpudirect_rdma=True)}) == []

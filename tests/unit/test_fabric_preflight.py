"""preflight's fabric findings from real sysfs and iproute2 texts: each names the node(s)
and the fix."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from types import SimpleNamespace as NS

from k3deploy.facts import fabric
from k3deploy.node.host_facts import parse_route
from k3deploy.steps.fabric import fabric_check
from k3deploy.steps.checks.preflight import PreflightFacts
from tests.unit.preflight_facts import preflight_facts

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"


def sysfs(name: str) -> tuple:
    return fabric.parse_ports((REAL / "linux-sysfs" / "6.x" / f"{name}.txt").read_text(), 0)


def facts(ports=(), devices=("uverbs0",), peermem=True, route="route-get-peer") -> PreflightFacts:
    text = (REAL / "iproute2" / "6.1.0" / f"{route}.txt").read_text()
    return preflight_facts(ib_ports=ports, ib_devices=devices, gpudirect_rdma=peermem,
                           route_to_peer=parse_route(text, 0))


def inv(mode="auto", env=None):
    nodes = [NS(name=f"node{i}", nic="eth0", self_ip=f"10.213.0.{10 + i}") for i in range(2)]
    return NS(engine=NS(fabric=mode, env=env or {}), nodes=nodes, head=nodes[0])


def node(i=1, **kw):
    i_ = inv(**kw)
    return NS(inv=i_, node=i_.nodes[i], name=i_.nodes[i].name, is_head=i == 0)


def test_clean_ib_node_has_no_problem():
    assert fabric_check.problems(facts(sysfs("ib-ports-cx7-ndr")), node()) == []


def test_port_down_and_ib_without_hca():
    found = fabric_check.problems(facts(sysfs("ib-ports-mlx4-one-down"), devices=()),
                                  node(mode="ib"))
    text = " | ".join(m for _, m in found)
    assert "engine.fabric is ib" in text and "mlx4_0:1 (InfiniBand) is DOWN" in text


def test_ifname_not_the_routes_interface_or_loopback():
    wrong = fabric_check.problems(facts(), node(env={"NCCL_SOCKET_IFNAME": "ens"}))
    assert [m for _, m in wrong] == ["NCCL_SOCKET_IFNAME=ens but the route to the other nodes "
                                     "leaves by eth0 (ip route get 10.213.0.10); set nodes[].nic "
                                     "to eth0 or fix the routing table"]
    lo = fabric_check.problems(facts(), node(env={"GLOO_SOCKET_IFNAME": "lo"}))
    assert "GLOO_SOCKET_IFNAME=lo names the loopback" in lo[0][1]
    assert fabric_check.matches("NCCL_SOCKET_IFNAME", "eth", "eth0")
    assert not fabric_check.matches("NCCL_SOCKET_IFNAME", "=eth", "eth0")
    assert not fabric_check.matches("NCCL_SOCKET_IFNAME", "^eth", "eth0")


def test_hcas_on_some_nodes_only_rates_differ_and_gpudirect_off():
    run = NS(inv=inv())
    some = {"node0": facts(sysfs("ib-ports-cx7-ndr")), "node1": facts()}
    assert "HCAs on node0 only, none usable on node1" in \
        fabric_check.cluster_problems(some, run)[0][2]
    rates = {"node0": facts(sysfs("ib-ports-cx7-ndr")),
             "node1": facts(sysfs("ib-ports-mlx4-one-down"), peermem=False)}
    assert "node0: 400 Gb/s; node1: 56 Gb/s" in fabric_check.cluster_problems(rates, run)[0][2]
    # no nvidia_peermem, and nothing read of the driver: unknown, not off
    assert "GPUDirect RDMA is unknown on node1" in fabric_check.warnings(rates, run)[0]
    assert fabric_check.cluster_problems(some, NS(inv=inv("socket"))) == []


def test_a_misspelt_preflight_fact_fails():
    with pytest.raises(TypeError, match="ib_port"):
        preflight_facts(ib_port=())
    with pytest.raises(TypeError, match="hook"):
        preflight_facts(gpu_hooks={"hook": [], "cdi": []})


@pytest.mark.parametrize("rank", [0, 1])
def test_every_probe_of_preflight_and_nvme_has_its_field(tmp_path, rank):
    """The runner builds the Facts from the probes' values: each has a field, and each field
    without a default has a probe (the shared cache's marker and volume on the head too)."""
    from tests.unit.test_shared_hf_plans import ctx
    from k3deploy.steps.disks.nvme import MoveToNvme
    from k3deploy.steps.checks.preflight import Preflight
    node = ctx(tmp_path, rank=rank)
    for step in (Preflight(), MoveToNvme()):
        names = {f.name for f in step.probes(node)}
        fields = dataclasses.fields(step.Facts)
        assert names <= {f.name for f in fields}
        assert {f.name for f in fields if f.default is dataclasses.MISSING} <= names

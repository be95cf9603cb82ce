"""status --json: the group's NCCL transport from real init lines; the sockets-with-HCAs
warning only for a multi-node group."""

from __future__ import annotations

from pathlib import Path

from k3deploy.cli import status_fabric
from k3deploy.facts import fabric, nccl

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"


def found(log: str, sysfs: str | None) -> dict:
    ports = fabric.parse_ports((REAL / "linux-sysfs" / "6.x" / f"{sysfs}.txt").read_text(), 0) \
        if sysfs else ()
    text = (REAL / "nccl" / log).read_text()
    return {"nccl": nccl.parse_transport(text), "ib_ports": ports,
            "ib_devices": ("uverbs0",) if sysfs else (), "gpudirect_rdma": bool(sysfs)}


def live(*nodes: dict) -> dict:
    return {f"node{i}": {"fabric": status_fabric.node_view(f)} for i, f in enumerate(nodes)}


def test_ib_group():
    view = live(found("2.19.3/init-ib-roce.txt", "ib-ports-cx7-ndr"),
                found("2.19.3/init-ib-roce.txt", "ib-ports-cx7-ndr"))
    assert status_fabric.cluster_view(view) == {"nccl_transport": "IB", "fabric_warning": None}
    assert view["node0"]["fabric"]["nccl_devices"] == ["mlx5_10:1/RoCE", "mlx5_11:1/RoCE"]


def test_sockets_with_hcas_warn_on_two_nodes_not_on_one():
    sock = found("2.x/init-socket-ib-disabled.txt", "ib-ports-cx7-ndr")
    two = status_fabric.cluster_view(live(sock, sock))
    assert two["nccl_transport"] == "Socket" and "node0, node1 have HCAs" in two["fabric_warning"]
    assert status_fabric.cluster_view(live(sock))["fabric_warning"] is None
    plain = found("2.x/init-socket-ib-disabled.txt", None)
    assert status_fabric.cluster_view(live(plain, plain))["fabric_warning"] is None


def test_verify_says_the_transport_and_warns_for_sockets_with_hcas():
    from k3deploy.steps.fabric import fabric_check
    from k3deploy.steps.engine.verify import VerifyFacts

    def verify_facts(found: dict) -> VerifyFacts:
        return VerifyFacts(container=None, images={}, gpus=None, **found)
    ib = verify_facts(found("2.19.3/init-ib-roce.txt", "ib-ports-cx7-ndr"))
    assert fabric_check.transport_lines({"node0": ib, "node1": ib}) == [
        "NCCL transport: IB over mlx5_10:1/RoCE, mlx5_11:1/RoCE"]
    sock = verify_facts(found("2.x/init-socket-ib-disabled.txt", "ib-ports-cx7-ndr"))
    lines = fabric_check.transport_lines({"node0": sock, "node1": sock})
    assert lines[0] == "NCCL transport: Socket over ib0, ibs85f0"
    assert lines[1].startswith("warning: NCCL uses sockets while node0, node1 have HCAs")
    unstarted = VerifyFacts(container=None, images={}, gpus=None, nccl=None)
    assert fabric_check.transport_lines({"node0": unstarted}) == []

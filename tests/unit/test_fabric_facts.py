"""Fabric facts: sysfs ports, /dev/infiniband, NCCL's init lines; real texts in, records out."""

from __future__ import annotations

import subprocess
from pathlib import Path

from k3deploy.cluster import inventory
from k3deploy.facts import fabric, nccl
from k3deploy.steps import probes
from tests.unit.invdata import four_nodes

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"


def real(tool: str, version: str, name: str) -> str:
    return (REAL / tool / version / f"{name}.txt").read_text()


def test_two_active_ndr_hcas():
    ports = fabric.parse_ports(real("linux-sysfs", "6.x", "ib-ports-cx7-ndr"), 0)
    assert ports == (fabric.IbPort("mlx5_0", 1, "ACTIVE", 400.0, "InfiniBand"),
                     fabric.IbPort("mlx5_1", 1, "ACTIVE", 400.0, "InfiniBand"))
    node = fabric.NodeFabric(ports, ("rdma_cm", "uverbs0", "uverbs1"), True)
    assert node.hcas == ("mlx5_0", "mlx5_1") and node.usable


def test_a_port_down_is_not_an_hca_to_use():
    ports = fabric.parse_ports(real("linux-sysfs", "6.x", "ib-ports-mlx4-one-down"), 0)
    assert [(p.label, p.state, p.rate_gbps) for p in ports] == [
        ("mlx4_0:1", "DOWN", 10.0), ("mlx4_0:2", "ACTIVE", 56.0)]
    assert fabric.NodeFabric(ports, (), False).usable is False   # no verbs device


def test_no_hca_is_an_empty_fabric_not_a_failure():
    assert fabric.parse_ports("", 0) == ()
    assert fabric.parse_ports("", 1) is None
    assert fabric.parse_devices("", 0) == ()
    assert fabric.parse_devices("uverbs0\nrdma_cm\numad0\n", 0) == ("rdma_cm", "umad0", "uverbs0")
    assert fabric.parse_rate("2.5 Gb/sec (1X)") == 2.5
    assert fabric.parse_rate("garbage") is None


def test_nccl_on_ib_roce():
    t = nccl.parse_transport(real("nccl", "2.19.3", "init-ib-roce"))
    # no channel line and no DMA-BUF line in what was quoted: GPUDirect unknown, not off
    assert t == nccl.NcclTransport("IB", ("mlx5_10:1/RoCE", "mlx5_11:1/RoCE"), None)


def test_nccl_on_sockets():
    t = nccl.parse_transport(real("nccl", "2.x", "init-socket-ib-disabled"))
    assert t == nccl.NcclTransport("Socket", ("ibs85f0", "ib0"), None)


def test_no_using_network_line_is_unknown_not_socket():
    assert nccl.parse_transport(real("nccl", "2.4.7", "init-ib-no-network-line")) is None
    assert nccl.parse_transport("") is None


def test_net_plugin_with_merged_nics_and_channels_without_gdrdma():
    """The HPC-X plugin: "Using network IBext_v8", virtual NICs merging two RoCE ports each;
    its channels over the network carry no "/GDRDMA": staged through host memory."""
    t = nccl.parse_transport(real("nccl", "2.x", "ibext-v8-merged-roce"))
    assert t.transport == "IB"
    assert t.devices == ("mlx5_2:1/RoCE", "mlx5_3:1/RoCE", "mlx5_0:1/RoCE", "mlx5_1:1/RoCE")
    assert t.gpudirect is False and "without GDRDMA" in t.gpudirect_evidence


def test_gdrdma_channel_of_a_plugin_with_sharp_ports():
    t = nccl.parse_transport(real("nccl", "2.x", "ibext-sharp-gdrdma"))
    assert t.transport == "IB" and t.devices == (
        "mlx5_0:1/IB/SHARP", "mlx5_1:1/IB/SHARP", "mlx5_4:1/IB/SHARP", "mlx5_5:1/IB/SHARP")
    assert t.gpudirect is True and "GDRDMA" in t.gpudirect_evidence


def test_dma_buf_available_says_gpudirect_before_any_channel():
    t = nccl.parse_transport(real("nccl", "2.x", "ibext-v8-dmabuf"))
    assert (t.transport, t.devices) == ("IB", ("mlx5_2:1/IB/SHARP",))
    assert t.gpudirect is True and t.gpudirect_evidence == "DMA-BUF is available on the GPU"


def test_a_net_name_with_spaces_and_a_proxy_rank_still_reads_gdrdma():
    assert nccl.gpudirect(real("nccl", "2.x", "plugin-name-with-spaces-gdrdma"))[0] is True
    assert nccl.gpudirect("h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via "
                          "NET/Socket/0\n") == (False, nccl.gpudirect("via NET/IB/0")[1])
    assert nccl.gpudirect(real("nccl", "2.19.3", "init-ib-roce")) == (None, None)


def test_gdrdma_channel_and_the_last_init_wins():
    log = (real("nccl", "2.x", "init-socket-ib-disabled")
           + real("nccl", "2.19.3", "init-ib-roce")
           + "h:1:2 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA\n")
    t = nccl.parse_transport(log)
    assert t.transport == "IB" and t.gpudirect


def _run_fact(fact, log: Path) -> str:
    """The fact's own script, run by sh against a `docker logs` that prints `log`."""
    script = f'docker() {{ cat {log}; }}\n{fact.script}'
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True).stdout


def test_the_nccl_fact_reads_only_the_logs_start_up_part(tmp_path):
    """The real init lines, then more request lines than the cap, then a line that would read
    as another transport: the transport comes from the start-up part, and the late line is
    never read."""
    init = real("nccl", "2.19.3", "init-ib-roce")
    log = tmp_path / "engine.log"
    filler = '"POST /v1/chat/completions HTTP/1.1" 200 OK\n' * (probes.STARTUP_LOG_LINES + 10)
    log.write_text(init + filler + "host:1:1 [0] NCCL INFO Using network Socket\n")
    fact = probes.nccl_transport(inventory.parse(four_nodes()))
    assert fact.parse(_run_fact(fact, log), 0).transport == "IB"


def test_the_nccl_fact_reads_each_ranks_debug_file_when_docker_logs_has_none(tmp_path):
    """NCCL_DEBUG_FILE: the init lines are in one file per rank process under the node's NCCL
    log dir, and stdout (block-buffered in a container) gave docker logs nothing yet."""
    inv = inventory.parse(four_nodes(paths={"nvme": str(tmp_path)}))
    logs = Path(probes.spec_from_inventory.nccl_log_dir(inv))
    logs.mkdir(parents=True)
    (logs / "node0.101.log").write_text(real("nccl", "2.x", "init-socket-ib-disabled"))
    (logs / "node0.102.log").write_text(
        real("nccl", "2.19.3", "init-ib-roce")
        + "h:1:2 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA\n")
    empty = tmp_path / "engine.log"
    empty.write_text("[2026-01-01 00:00:00] Init torch distributed begin.\n")
    fact = probes.nccl_transport(inv)
    found = fact.parse(_run_fact(fact, empty), 0)
    assert found == nccl.NcclTransport("IB", ("mlx5_10:1/RoCE", "mlx5_11:1/RoCE"), True,
                                       "a channel via NET/.../GDRDMA")
    for f in logs.iterdir():
        f.unlink()
    assert fact.parse(_run_fact(fact, empty), 0) is None   # no file, nothing in the log
    # a container started without the files (an older launch): docker logs still answers
    assert fact.parse(_run_fact(fact, tmp_path / "missing.log"), 0) is None
    legacy = tmp_path / "legacy.log"
    legacy.write_text(real("nccl", "2.19.3", "init-ib-roce"))
    assert fact.parse(_run_fact(fact, legacy), 0).transport == "IB"


def test_one_read_of_the_log_answers_the_transport_and_the_phases(tmp_path):
    """SGLang's real start-up lines with NCCL's between them and many more NCCL channel lines
    than are kept: one command (the batch runs it once) gives both facts their values."""
    inv = inventory.parse(four_nodes())
    transport, phases = probes.nccl_transport(inv), probes.startup_phase_times(inv)
    assert transport.script == phases.script
    sglang = REAL / "sglang" / "0.5.16"
    channels = "h:1:2 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] via NET/IB/0/GDRDMA\n" * 500
    log = tmp_path / "engine.log"
    log.write_text((sglang / "group-formed.txt").read_text() + real("nccl", "2.19.3", "init-ib-roce")
                   + channels + (sglang / "ready.txt").read_text())
    out = _run_fact(transport, log)
    assert len(out.splitlines()) < 60   # the phase lines, NCCL's init lines, one channel
    found = transport.parse(out, 0)
    assert (found.transport, found.gpudirect) == ("IB", True)
    assert phases.parse(out, 0) == {"distributed_init": 7.0, "to_ready": 147.0}


def test_the_facts_read_keeps_each_kind_of_gpudirect_evidence(tmp_path):
    """The log reader (awk over the start-up part) keeps a DMA-BUF line and a channel line of
    a net whose name has spaces, besides the init lines."""
    fact = probes.nccl_transport(inventory.parse(four_nodes(paths={"nvme": str(tmp_path)})))
    log = tmp_path / "engine.log"
    log.write_text(real("nccl", "2.x", "ibext-v8-dmabuf"))
    assert fact.parse(_run_fact(fact, log), 0).gpudirect_evidence == "DMA-BUF is available on the GPU"
    log.write_text(real("nccl", "2.x", "ibext-v8-dmabuf")
                   + real("nccl", "2.x", "plugin-name-with-spaces-gdrdma"))
    assert fact.parse(_run_fact(fact, log), 0).gpudirect_evidence == "a channel via NET/.../GDRDMA"
    log.write_text(real("nccl", "2.x", "ibext-v8-merged-roce"))
    assert fact.parse(_run_fact(fact, log), 0).gpudirect is False

"""engine.fabric: which devices and NCCL variables the engine container gets, from the node's
fabric facts (real sysfs texts) and the inventory setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from k3deploy import engines
from k3deploy.engines import fabric as engine_fabric
from k3deploy.facts import fabric

from test_engines import h100_spec, pairs

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "linux-sysfs" / "6.x"


def node(name: str, devices=("rdma_cm", "uverbs0", "uverbs1")) -> fabric.NodeFabric:
    ports = fabric.parse_ports((REAL / f"{name}.txt").read_text(), 0)
    return fabric.NodeFabric(ports, devices, True)


def env_of(argv: list[str]) -> dict[str, str]:
    return dict(v.partition("=")[::2] for k, v in pairs(argv) if k == "--env")


@pytest.mark.parametrize("mode", ["auto", "ib"])
def test_hcas_reach_the_container(mode):
    hcas, disable = engine_fabric.choice(mode, node("ib-ports-cx7-ndr"))
    argv = engines.sglang_launch_argv(h100_spec(ib_hcas=hcas, ib_disable=disable))
    image = argv.index("lmsysorg/sglang:kimi-k3")
    assert ("--device", "/dev/infiniband") in pairs(argv[:image])
    assert ("--cap-add", "IPC_LOCK") in pairs(argv[:image])
    env = env_of(argv[:image])
    assert env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_1" and "NCCL_IB_DISABLE" not in env
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_SUBSYS"] == "INIT,NET"


def test_socket_disables_ib_even_with_hcas():
    hcas, disable = engine_fabric.choice("socket", node("ib-ports-cx7-ndr"))
    argv = engines.sglang_launch_argv(h100_spec(ib_hcas=hcas, ib_disable=disable))
    assert "--device" not in argv and "--cap-add" not in argv
    assert env_of(argv)["NCCL_IB_DISABLE"] == "1" and "NCCL_IB_HCA" not in env_of(argv)


def test_no_hca_or_no_verbs_device_passes_nothing():
    assert engine_fabric.choice("auto", None) == ((), False)
    assert engine_fabric.choice("auto", node("ib-ports-cx7-ndr", devices=())) == ((), False)
    # a port down is not named; the active one is
    assert engine_fabric.choice("auto", node("ib-ports-mlx4-one-down")) == (("mlx4_0",), False)
    argv = engines.sglang_launch_argv(h100_spec())
    assert "--device" not in argv and "NCCL_IB_DISABLE" not in env_of(argv)


def test_nccls_debug_files_go_to_the_nodes_disk_and_stdout_is_unbuffered():
    """NCCL's stdout is a block-buffered pipe in a container (NVIDIA/nccl#1841): each rank
    process writes its own line-buffered file into the node's NCCL log dir instead."""
    argv = engines.sglang_launch_argv(h100_spec(nccl_log_host_dir="/mnt/nvme/.k3deploy/nccl-logs"))
    image = argv.index("lmsysorg/sglang:kimi-k3")
    i = argv.index("/mnt/nvme/.k3deploy/nccl-logs:/k3deploy/nccl-logs")
    assert argv[i - 1] == "-v" and i < image
    env = env_of(argv[:image])
    assert env["NCCL_DEBUG_FILE"] == "/k3deploy/nccl-logs/%h.%p.log"
    assert env["PYTHONUNBUFFERED"] == "1"
    bare = env_of(engines.sglang_launch_argv(h100_spec()))
    assert "NCCL_DEBUG_FILE" not in bare and bare["PYTHONUNBUFFERED"] == "1"
    # an inventory's engine.env can take either away (null removes a default)
    off = env_of(engines.sglang_launch_argv(h100_spec(
        nccl_log_host_dir="/d", extra_env={"NCCL_DEBUG_FILE": None, "PYTHONUNBUFFERED": None})))
    assert "NCCL_DEBUG_FILE" not in off and "PYTHONUNBUFFERED" not in off

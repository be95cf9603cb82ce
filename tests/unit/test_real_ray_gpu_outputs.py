"""Raw node output in, value out: `ray status`, `ray start` and `nvidia-smi` as the real tools
print them (tests/fixtures/real/, each file with its source beside it)."""

from __future__ import annotations

import pytest

from k3deploy.cluster import gpus as gpu_table
from k3deploy.cluster import inventory
from k3deploy.facts import nvidia_smi
from k3deploy.facts import ray
from k3deploy.facts.ray import GpuUsage, RayStatus
from k3deploy.steps.engine import raylayout
from k3deploy.steps.checks.preflight import _gpu_problems
from k3deploy.steps.engine.verify import VerifyEndpoint, VerifyFacts
from tests.realfix import real as real_file
from tests.unit.preflight_facts import preflight_facts


def real(tool: str, name: str) -> str:
    return real_file(f"{tool}/{name}")


@pytest.mark.parametrize("name, nodes, gpus, used, reserved, reported", [
    ("status-no-report-yet.txt", 0, 0.0, 0.0, 0.0, False),
    ("status-2nodes-16gpu.txt", 2, 16.0, 0.0, 0.0, True),
    ("status-2nodes-16gpu-placement-groups.txt", 2, 16.0, 16.0, 16.0, True),
    ("status-pending-placement-group.txt", 2, 0.0, 0.0, 0.0, True),
])
def test_ray_status(name, nodes, gpus, used, reserved, reported):
    status = ray.parse_status(real("ray/2.x", name), 0)
    assert status == RayStatus(gpus, used, reserved, nodes=nodes, reported=reported)


def test_gpus_reserved_in_placement_groups_and_unused_are_a_running_serve():
    """A serve whose ranks claim no GPU of their placement groups (TP 1, DP over Ray) holds
    them all the same; an unplaced group reserves nothing and is no serve."""
    found = ray.gpu_usage(real("ray/2.x", "status-gpus-reserved-unused.txt"))
    assert found == GpuUsage(gpus=2.0, gpus_used=0.0, gpus_reserved=1.0)
    assert raylayout.serve_running(RayStatus(found.gpus, found.gpus_used, found.gpus_reserved,
                                             nodes=1), healthy=False)
    pending = ray.parse_status(real("ray/2.x", "status-pending-placement-group.txt"), 0)
    assert not raylayout.serve_running(pending, healthy=False)


def test_ray_status_without_a_cluster_is_no_answer():
    out = ("ConnectionError: Could not find any running Ray instance. Please specify the one to "
           "connect to by setting `--address` flag or `RAY_ADDRESS` environment variable.")
    assert ray.parse_status(out, 1) is None


def test_a_fresh_head_is_a_wait_not_a_missing_node():
    inv = inventory.parse({"cluster": "b200", "engine": {"kind": "vllm"},
                           "gpu": {"model": "b200", "count": 8},
                           "nodes": [{"name": f"node{i}", "address": f"10.0.0.{10 + i}"}
                                     for i in range(2)]})
    fresh = ray.parse_status(real("ray/2.x", "status-no-report-yet.txt"), 0)
    assert "no cluster report yet" in raylayout.whole_problem(fresh, inv)
    settled = ray.parse_status(real("ray/2.x", "status-2nodes-16gpu.txt"), 0)
    assert raylayout.whole_problem(settled, inv) is None
    held = ray.parse_status(real("ray/2.x", "status-2nodes-16gpu-placement-groups.txt"), 0)
    assert raylayout.serve_running(held, healthy=False)


@pytest.mark.parametrize("name", ["start-head.txt", "start-worker-block.txt"])
def test_ray_start_says_the_node_registered(name):
    assert raylayout.RAY_STARTED in real("ray/2.x", name)


@pytest.mark.parametrize("path, bus, reason", [
    ("560/lost-gpu-unknown-error.txt", "0000:17:00.0", "Unknown Error"),
    ("520.61.05/lost-gpu-unknown-error.txt", "0000:0B:00.0", "Unknown Error"),
    ("unknown/lost-gpu-is-lost.txt", "0000:02:00.0",
     "GPU is lost. Reboot the system to recover this GPU"),
])
def test_nvidia_smi_lost_gpu(path, bus, reason):
    # The transcripts do not show the exit code; nvidia-smi(1) gives 15 (GPU lost) or 255.
    out = real("nvidia-smi", path)
    assert nvidia_smi.parse_lost(out, 255) == (nvidia_smi.LostGpu(bus, reason),)
    assert nvidia_smi.parse_gpus(out, 255) is None and nvidia_smi.parse_driver(out, 255) is None


def test_nvidia_smi_return_codes_say_which_is_a_lost_gpu():
    codes = real("nvidia-smi", "535.261.03/return-values.txt")
    assert "Return code 15 - The GPU has fallen off the bus" in codes
    assert "Return code 255 - Other error" in codes


class _Node:
    name = "node1"

    def __init__(self, inv):
        self.inv = inv


def test_preflight_names_the_lost_gpu_and_says_reboot():
    inv = inventory.parse({"cluster": "h100", "engine": {"kind": "sglang"},
                           "gpu": {"model": "h100", "count": 8},
                           "nodes": [{"name": "node1", "address": "10.0.0.11"}]})
    out = real("nvidia-smi", "560/lost-gpu-unknown-error.txt")
    facts = preflight_facts(gpus=nvidia_smi.parse_gpus(out, 255),
                            gpus_lost=nvidia_smi.parse_lost(out, 255), cuda=None)
    (check, message), = _gpu_problems(facts, _Node(inv))
    assert check == "gpus" and "0000:17:00.0" in message and "reboot" in message
    assert "install the NVIDIA driver" not in message


@pytest.mark.parametrize("path, count, name, total, cuda, driver, model", [
    ("565.57.01/h100-8x-q.txt", 8, "NVIDIA H100 80GB HBM3", 81559, "12.7", "565.57.01", "h100"),
    ("550.90.12/h200-1x-q.txt", 1, "NVIDIA H200", 143771, "12.4", "550.90.12", "h200"),
])
def test_nvidia_smi_q(path, count, name, total, cuda, driver, model):
    out = real("nvidia-smi", path)
    gpus = nvidia_smi.parse_gpus(out, 0)
    assert [g.name for g in gpus] == [name] * count
    assert {(g.total_mib, g.used_mib) for g in gpus} == {(total, 1)}
    assert nvidia_smi.parse_cuda(out, 0) == cuda and nvidia_smi.parse_driver(out, 0) == driver
    assert nvidia_smi.parse_lost(out, 0) == ()
    assert gpu_table.match_smi_name(name).key == model


def test_verify_names_a_gpu_lost_after_bring_up():
    inv = inventory.parse({"cluster": "h100", "engine": {"kind": "sglang"},
                           "gpu": {"model": "h100", "count": 8},
                           "nodes": [{"name": "node0", "address": "10.0.0.10"},
                                     {"name": "node1", "address": "10.0.0.11"}]})
    node = _Node(inv)
    node.is_head, node.rank = False, 1
    out = real("nvidia-smi", "520.61.05/lost-gpu-unknown-error.txt")
    facts = VerifyFacts(None, {}, nvidia_smi.parse_gpus(out, 255), None,
                        gpus_lost=nvidia_smi.parse_lost(out, 255))
    (check, message), = VerifyEndpoint().problems(facts, node)
    assert check == "memory" and "GPU 0000:0B:00.0 is lost" in message and "reboot" in message

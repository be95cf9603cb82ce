"""Real-tool behaviour on the testbed (issue 18): Ray 2.60's `ray status` lags behind
`ray start` (profile ray-2.60: one report every 5 s, "No cluster status. ..." before the
first), and a GPU that fell off the bus (profile lost-gpu). The ups skip the dry-fire: these
watch the real launch's Ray path (test_other_configs runs the dry-fire over Ray). Needs root
(the testbed)."""

from __future__ import annotations

import os

import pytest

from k3run import k3, out
from polling import wait_until
from tbfixture import set_engine, testbed

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="the testbed needs root")]


REPORT_SECONDS = 5.0   # profile ray-2.60: the first `ray status` report comes this long after


def _head_calls(tb) -> list[list[str]]:
    return [c["argv"] for c in tb.stats()["nodes"]["node0"]["calls"]]


def _serve_after_head_start(tb) -> float:
    """Seconds from the head container's `docker run` to the exec of `vllm serve`."""
    calls = tb.stats()["nodes"]["node0"]["calls"]
    start = next(c["t"] for c in calls if c["argv"][:2] == ["docker", "run"])
    return next(c["t"] for c in calls if c["argv"][:3] == ["docker", "exec", "-d"]) - start


def test_first_vllm_up_over_ray_waits_for_ray_status(tmp_path):
    with testbed(tmp_path, nodes=2, gpu="b200", gpus_per_node=8, engine="vllm",
                 profile="ray-2.60") as tb:
        set_engine(tb, executor="ray")
        inv = str(tb.inventory)
        first = k3("up", "-i", inv, "--no-dry-fire")
        assert first.returncode == 0, out(first)
        # No serve before Ray's first report could count the nodes (a single read right
        # after the join sees "No cluster status", and a serve then would fail this first up).
        assert _serve_after_head_start(tb) >= REPORT_SECONDS
        starts = [a for a in _head_calls(tb) if a[:2] == ["docker", "run"]
                  or a[:3] == ["docker", "exec", "-d"]]
        again = k3("up", "-i", inv, "--no-dry-fire")
        assert again.returncode == 0, out(again)
        assert [a for a in _head_calls(tb) if a[:2] == ["docker", "run"]
                or a[:3] == ["docker", "exec", "-d"]] == starts      # changed nothing
        verified = k3("verify", "-i", inv)
        assert verified.returncode == 0, out(verified)
        down = k3("down", "-i", inv)
        assert down.returncode == 0, out(down)


def test_check_names_the_lost_gpu_by_node_and_bus_id(tmp_path):
    # One 8x B300 node fits the model: the lost GPU is the only finding.
    with testbed(tmp_path, nodes=1, gpu="b300", gpus_per_node=8,
                 node=["node0:profile=lost-gpu"]) as tb:
        smi = tb.ssh("node0", "nvidia-smi -q; echo rc=$?")
        # lost_gpu 3 sits at bus 0x48 on the stand-in's bus layout (0x18 + 0x10 * index).
        assert smi.stdout.strip().splitlines() == [
            "Unable to determine the device handle for GPU0000:48:00.0: Unknown Error", "rc=255"]
        checked = k3("check", "-i", str(tb.inventory))
        text = out(checked)
        assert checked.returncode == 1, text
        assert "node0" in text and "0000:48:00.0" in text and "reboot" in text, text
        assert "1 problem(s) found" in text and "install the NVIDIA driver" not in text


def test_vllm_up_over_ray_when_the_gpus_are_reserved_but_unused(tmp_path):
    """Profile ray-gpus-reserved (TP 1, DP over Ray): `ray status` shows every GPU reserved in
    the serve's placement groups and none used; launch takes that as the serve holding them,
    and the re-run leaves it alone."""
    with testbed(tmp_path, nodes=2, gpu="b200", gpus_per_node=8, engine="vllm",
                 profile="ray-gpus-reserved") as tb:
        set_engine(tb, executor="ray")
        inv = str(tb.inventory)
        first = k3("up", "-i", inv, "--no-dry-fire")
        assert first.returncode == 0, out(first)
        shape = " 0.0/16.0 GPU (0.0 used of 16.0 reserved in placement groups)"
        # the monitor's next report (profile ray-2.60: every 5 s) counts the serve's groups
        wait_until(lambda: shape in tb.ssh("node0", "docker exec k3 ray status").stdout,
                   3 * REPORT_SECONDS, "a `ray status` report with the serve's groups")
        execs = [a for a in _head_calls(tb) if a[:3] == ["docker", "exec", "-d"]]
        again = k3("up", "-i", inv, "--no-dry-fire")
        assert again.returncode == 0, out(again)
        assert [a for a in _head_calls(tb) if a[:3] == ["docker", "exec", "-d"]] == execs

"""scripts/benchproject.py: the 4x8 H100 weights-ready projection from a bench's CPU per GB,
naming the bound that binds; a node's share is hundreds of GB, so a figure past start-up is
the one that counts where the bench measured it."""

import benchproject

HUB = {"cpu_s_per_GB": 4.0, "cpu_s_per_GB_after_start": 2.0}
PEER = {"cpu_s_per_GB": 2.0, "cpu_s_per_GB_after_start": 1.0, "server_cpu_s_per_GB": 0.2}


def test_the_cpu_seconds_are_the_per_byte_costs_past_start_up_over_each_stream():
    out = benchproject.project(HUB, PEER, parallel=True)
    assert out["per_node_GB"] == {"hub": 390, "from_peers": 1170, "to_peers": 1170}
    assert out["node_cpu_seconds"] == round(390 * 2.0 + 1170 * 1.0 + 1170 * 0.2)


def test_without_a_start_up_figure_the_whole_run_s_is_used():
    hub, peer = {"cpu_s_per_GB": 4.0}, {"cpu_s_per_GB": 2.0, "server_cpu_s_per_GB": 0.2}
    out = benchproject.project(hub, peer, parallel=True)
    assert out["node_cpu_seconds"] == round(390 * 4.0 + 1170 * 2.0 + 1170 * 0.2)


def test_one_core_binds_when_the_work_is_not_spread_over_processes():
    out = benchproject.project(HUB, PEER, parallel=False)
    assert out["binding"] == "cpu" and out["node"]["cores_the_downloader_uses"] == 1
    assert out["weights_ready_minutes"] == round(out["cpu_s"] / 60, 1)


def test_with_the_work_spread_the_nvme_binds_at_the_defaults():
    out = benchproject.project(HUB, PEER, parallel=True)
    assert out["nvme_s"] == round(1560 / 3.5)
    assert out["binding"] == "nvme" and out["weights_ready_minutes"] == round(1560 / 3.5 / 60, 1)

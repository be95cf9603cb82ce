"""scripts/benchserving.py: past weights-ready, the engine's load (every rank reads the whole
checkpoint through the node's page cache) and start-up, naming the bound that binds."""

import benchserving



def test_after_an_o_direct_download_the_drive_is_read_once_and_one_rank_s_rate_binds():
    out = benchserving.project_serving(7.4)
    assert out["checkpoint_reads_from_nvme"] == 1 and out["node"]["checkpoint_fits_page_cache"]
    assert out["nvme_read_s"] == round(1560 / 3.5) and out["rank_read_s"] == round(1560 / 0.87)
    assert out["load_binding"] == "rank_read"
    assert out["serving_minutes"] == round(7.4 + (1560 / 0.87 + 420) / 60, 1)


def test_a_node_whose_ram_cannot_hold_the_checkpoint_reads_it_once_per_rank():
    out = benchserving.project_serving(7.4, node_ram_gb=1024)
    assert out["checkpoint_reads_from_nvme"] == 8
    assert out["load_binding"] == "nvme_read" and out["nvme_read_s"] == round(8 * 1560 / 3.5)


def test_a_warm_relaunch_reads_nothing_from_the_drive_and_starts_with_cached_kernels():
    out = benchserving.project_serving(0.0, warm=True, kernels_cached=True, rank_load_gbps=4.0)
    assert out["checkpoint_reads_from_nvme"] == 0 and out["nvme_read_s"] == 0
    assert out["load_minutes"] == round(1560 / 4.0 / 60, 1) and out["startup_minutes"] == round(104 / 60, 1)


def test_a_fast_loader_leaves_the_drive_binding():
    out = benchserving.project_serving(7.4, rank_load_gbps=10.0)
    assert out["load_binding"] == "nvme_read"

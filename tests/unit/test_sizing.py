"""The sizing planner against every figure the deployment guide prints (within 2%), one test each.

Figures are typed in from ../shared/reference/kimi-k3-deployment-guide.txt, never taken from
k3deploy.cluster.sizing's constants, so a changed constant shows up here as a broken guide figure.
"""

import json

import pytest

from k3deploy.cluster.gpus import get_gpu, match_smi_name
from k3deploy.cluster.sizing import (
    REFERENCE_CONFIGS,
    fits_inventory,
    fits_inventory_of,
    plan,
    size_config,
)

GUIDE = 0.02  # every guide figure is reproduced within 2%


def near(value):
    return pytest.approx(value, rel=GUIDE)


@pytest.fixture(scope="module")
def b300_1x8():
    return size_config("b300", 1, 8, "mxfp4", engine="vllm")


@pytest.fixture(scope="module")
def b200_1x8():
    return size_config("b200", 1, 8, "mxfp4")


@pytest.fixture(scope="module")
def b200_2x8():
    return size_config("b200", 2, 8, "mxfp4")


@pytest.fixture(scope="module")
def h100_4x8():
    return size_config("h100", 4, 8, "mxfp4")


@pytest.fixture(scope="module")
def h200_4x8():
    return size_config("h200", 4, 8, "mxfp4")


# --- "VRAM Math: The Real 1.56TB Checkpoint vs the 1.4TB Estimate" ---


def test_checkpoint_is_about_160gb_more_than_2_8t_at_4_bits(b300_1x8):
    assert b300_1x8.checkpoint_gb == 1560.94
    assert b300_1x8.checkpoint_gb - 2800 * 0.5 == near(160)


# --- "Single 8x B300 Node (2,304GB)" ---


def test_b300_8x_totals_2304gb(b300_1x8):
    assert b300_1x8.total_memory_gb == near(2304)


def test_b300_8x_leaves_about_743gb_headroom(b300_1x8):
    assert b300_1x8.fits
    assert b300_1x8.headroom_gb == near(743)


def test_b300_8x_about_93gb_free_per_gpu(b300_1x8):
    # The guide's "about 93GB free per B300" is 743 / 8: naive headroom spread over the GPUs.
    # headroom_per_gpu_gb follows that figure. The per-rank model (duplicated stack, usable
    # memory, static fraction) gives less: ~80 GB beside the resident weights and a ~27 GB KV
    # pool at vLLM's 0.9. The model keeps both because the guide's comparisons ("25x") use 93.
    assert b300_1x8.headroom_per_gpu_gb == near(93)
    assert b300_1x8.usable_per_gpu_gb - b300_1x8.per_rank_resident_gb < 93 * (1 - GUIDE)


def test_b300_about_25x_the_per_gpu_headroom_of_the_h100_kv_pool(b300_1x8, h100_4x8):
    # "roughly 25x the per-GPU memory headroom ... (about 93GB free per B300 against a 3.6GB KV
    # pool per H100)": 92.9 / 3.6 = 25.8; the guide rounds its own ratio down to "roughly 25",
    # so the test checks the ratio of the two figures it is built from.
    ratio = b300_1x8.headroom_per_gpu_gb / h100_4x8.kv_pool_per_gpu_gb
    assert ratio == near(93 / 3.6)


def test_b300_vllm_dp8_ep8_puts_112_experts_per_gpu(b300_1x8):
    shape = b300_1x8.launch
    assert (shape.engine, shape.tp, shape.dp, shape.ep, shape.ray) == ("vllm", 1, 8, 8, False)
    assert b300_1x8.experts_per_gpu == 112


def test_b300_sglang_single_node_shape_is_tp8_ep8_dp8_with_dp_attention():
    shape = size_config("b300", 1, 8, "mxfp4", engine="sglang").launch
    assert (shape.tp, shape.ep, shape.dp, shape.dp_attention) == (8, 8, 8, True)
    assert shape.moe_runner_backend is None  # native FP4: no marlin


# --- "8x B200 (1,536GB) Does Not Fit, and the Reason Matters" ---


def test_b200_8x_totals_1536gb_and_is_short_by_about_25gb(b200_1x8):
    assert b200_1x8.total_memory_gb == near(1536)
    assert not b200_1x8.fits
    assert -b200_1x8.headroom_gb == near(25)
    assert any("short by ~25 GB" in n for n in b200_1x8.notes)


def test_b200_8x_would_clear_the_naive_1_4tb_by_136gb(b200_1x8):
    assert b200_1x8.total_memory_gb - 1400 == near(136)
    assert any("by 136 GB" in n for n in b200_1x8.notes)


def test_b200_8x_dies_about_94_percent_through_weight_loading(b200_1x8):
    # The guide: "dies at 94% of the way through weight loading". Bare arithmetic
    # (1,536 / 1,560.94 = 98%) cannot give that; the per-rank model (usable 190.4 GB against
    # 205.9 GB per rank) gives 92.4%, within 2% of the guide, so the note uses the model.
    loaded = b200_1x8.usable_per_gpu_gb / b200_1x8.per_rank_resident_gb
    assert loaded * 100 == near(94)
    assert any("dies ~92% of the way through weight loading" in n for n in b200_1x8.notes)


def test_b200_16x_totals_3072gb_with_about_1511gb_headroom(b200_2x8):
    assert b200_2x8.fits
    assert b200_2x8.total_memory_gb == near(3072)
    assert b200_2x8.headroom_gb == near(1511)


def test_b200_16x_dp16_ep16_puts_56_experts_per_gpu(b200_2x8):
    shape = b200_2x8.launch
    # mp: vLLM's own executor across nodes, what new inventories say (engine.executor)
    assert (shape.engine, shape.dp, shape.ep, shape.ray, shape.executor) == \
        ("vllm", 16, 16, False, "mp")
    assert b200_2x8.experts_per_gpu == 56


def test_b200_needs_two_nodes(b200_1x8):
    # "Scale to 16x B200 across two 8-GPU nodes ... and the problem disappears"
    assert b200_1x8.min_nodes == 2 and b200_1x8.min_nodes_to_serve == 2


# --- "Four 8x H100 Nodes (32 GPUs, 2,560GB): The Hopper Path" ---


def test_h100_4x8_totals_2560gb(h100_4x8):
    assert h100_4x8.gpus == 32
    assert h100_4x8.total_memory_gb == near(2560)


def test_h100_4x8_naive_slack_is_about_999gb(h100_4x8):
    assert h100_4x8.headroom_gb == near(999)


def test_h100_each_rank_holds_about_59_6gb(h100_4x8):
    assert h100_4x8.per_rank_resident_gb == near(59.6)


def test_h100_about_1908gb_resident_across_32_gpus(h100_4x8):
    assert h100_4x8.per_rank_resident_gb * 32 == near(1908)


def test_h100_the_extra_about_350gb_is_per_rank_duplication(h100_4x8):
    extra = h100_4x8.per_rank_resident_gb * 32 - h100_4x8.checkpoint_gb
    assert extra == near(350)


def test_h100_28_experts_per_gpu(h100_4x8):
    assert h100_4x8.experts_per_gpu == 28


def test_h100_about_78gb_usable_of_80(h100_4x8):
    assert h100_4x8.usable_per_gpu_gb == near(78)


def test_h100_kv_pool_is_about_3_6gb(h100_4x8):
    assert h100_4x8.launch.static_fraction == 0.85  # the guide's --mem-fraction-static
    assert h100_4x8.kv_pool_per_gpu_gb == near(3.6)


def test_h100_kda_state_is_about_3_4gb(h100_4x8):
    assert h100_4x8.kda_state_per_gpu_gb == near(3.4)


def test_h100_shape_is_the_cookbook_tp32_ep32_marlin(h100_4x8):
    shape = h100_4x8.launch
    assert (shape.engine, shape.tp, shape.ep, shape.dp, shape.dp_attention) == ("sglang", 32, 32, 1, False)
    assert shape.moe_runner_backend == "marlin"


def test_minimum_hopper_configuration_is_four_8x_h100_nodes(h100_4x8):
    # "the minimum Hopper configuration is four 8-GPU H100 nodes, 32 GPUs". Bare weight-fit
    # (min_gpus, the way the guide counts elsewhere) says 20 GPUs = 3 nodes; only the per-rank
    # model (28 GPUs before the KV pool runs out at 0.85) gives the guide's four nodes.
    assert h100_4x8.min_gpus == 20 and h100_4x8.min_nodes == 3
    assert h100_4x8.min_gpus_to_serve == 28 and h100_4x8.min_nodes_to_serve == 4
    assert not size_config("h100", 3, 8, "mxfp4").fits


def test_h100_idle_cluster_costs_about_93_per_hour(h100_4x8):
    # "an idle 32-GPU H100 cluster was costing about $93/hr": ~$2.90 per GPU-hour x 32
    assert size_config("h100", 4, 8, price_per_gpu_hour=2.90).cost_per_hour == near(93)
    assert h100_4x8.cost_per_hour is None


# --- H200: "141GB per GPU puts 32 GPUs at 4,512GB" ---


def test_h200_4x8_totals_4512gb(h200_4x8):
    assert h200_4x8.total_memory_gb == near(4512)


def test_h200_kv_pool_closer_to_90gb_per_gpu(h200_4x8):
    # The guide: H200 "turns that 3.6GB KV pool into something closer to 90GB per GPU". That is
    # the naive per-GPU headroom, (4,512 - 1,560.94) / 32 = 92.2 GB (2.4% above the guide's
    # hedged "closer to 90"). The per-rank model that reproduces the H100 pool exactly gives
    # H200 a ~59 GB static pool at 0.85, ~30 GB of it KV. The model follows the per-rank
    # figures for kv_pool_per_gpu_gb (they come from the same SGLang shape the guide measured)
    # and reports the guide's 90 as headroom_per_gpu_gb.
    assert h200_4x8.headroom_per_gpu_gb == pytest.approx(90, rel=0.03)
    assert h200_4x8.kv_pool_per_gpu_gb == pytest.approx(30.3, rel=0.01)
    assert h200_4x8.kv_pool_per_gpu_gb > 8 * 3.6  # still "real KV headroom" against H100


# --- "GB200 NVL72 Slice Sizing for MXFP8/BF16" ---


def test_b300_2x8_at_mxfp8_totals_4608gb_with_over_1_8tb_headroom():
    r = size_config("b300", 2, 8, "mxfp8")
    assert r.total_memory_gb == near(4608)
    assert r.checkpoint_gb == near(2800)
    assert r.headroom_gb > 1800 and r.fits


def test_bf16_needs_about_three_b300_nodes():
    # "BF16 needs closer to three B300 nodes": bare weight-fit is 20 GPUs -> 3 nodes of 8, and
    # min_gpus / min_nodes follow the guide's count. The per-rank model is stricter: three nodes
    # launch with SGLang (vLLM stops at two nodes), and at its 0.85 the 244 GB per rank leaves
    # no KV pool; at 0.86 it does. The row says so rather than hide the guide's count.
    r = size_config("b300", 3, 8, "bf16")
    assert r.checkpoint_gb == near(5600)
    assert 17 <= r.min_gpus <= 24 and r.min_nodes == 3
    assert r.engine == "sglang" and not r.fits
    assert any("raise it to at least 0.86" in n for n in r.notes)
    assert size_config("b300", 3, 8, "bf16", mem_fraction_static=0.86).fits
    assert not size_config("b300", 2, 8, "bf16", mem_fraction_static=0.98).fits


def test_gb200_nvl72_has_about_13_5tb():
    assert size_config("gb200", 18, 4, "mxfp4").total_memory_gb == near(13500)


def test_gb200_mxfp8_needs_about_16_gpus():
    # "Doing the bare weight-fit math: MXFP8's 2.8TB needs about 16 of those 72 GPUs". min_gpus
    # is that bare count. The per-rank model needs 19 (each rank's share + the duplicated stack
    # must stay inside the static fraction), which min_gpus_to_serve and the notes report; the
    # guide itself says the bare count is a floor, not a serving config.
    r = size_config("gb200", 4, 4, "mxfp8")
    assert r.min_gpus == 16
    assert r.min_gpus_to_serve > 16 and not r.fits


def test_gb200_bf16_needs_about_31_gpus():
    r = size_config("gb200", 8, 4, "bf16")
    assert r.min_gpus == 31
    assert r.min_gpus_to_serve > 31


def test_mxfp8_and_bf16_rows_say_no_checkpoint_is_published():
    r = size_config("b300", 2, 8, "mxfp8")
    assert any("no published mxfp8 checkpoint" in n for n in r.notes)
    assert not any("no published" in n for n in size_config("b300", 1, 8).notes)


# --- context length ("Tool-Call-Parser, Reasoning-Parser, and Max-Model-Len for 1M Context") ---


def test_1m_context_is_flagged_as_the_architectural_max_not_a_target():
    r = size_config("b300", 1, 8, max_model_len=1_048_576)
    assert any("architectural max, not a target" in n and "131072" in n for n in r.notes)
    assert r.launch.context_length == 1_048_576


def test_context_beyond_1m_is_flagged():
    assert any("exceeds" in n for n in size_config("b300", 1, 8, max_model_len=2_000_000).notes)


def test_long_context_on_a_small_pool_cites_the_100gb_budget():
    notes = size_config("h100", 4, 8, max_model_len=524_288).notes
    assert any("well over 100 GB" in n and "no per-token KV size" in n for n in notes)
    assert not any("context" in n for n in size_config("h100", 4, 8, max_model_len=131_072).notes)


# --- plan() and fits_inventory() ---


def test_plan_without_arguments_returns_every_reference_config():
    results = plan()
    assert len(results) == len(REFERENCE_CONFIGS)
    shapes = {(r.gpu, r.nodes, r.gpus_per_node) for r in results}
    for shape in [("b300", 1, 8), ("b200", 1, 8), ("b200", 2, 8), ("h100", 4, 8), ("h200", 4, 8)]:
        assert shape in shapes
    assert {r.precision for r in results} == {"mxfp4", "mxfp8", "bf16"}
    assert any(r.gpu == "gb200" and r.gpus == 72 for r in results)
    gpus_in_order = [r.gpu for r in results]
    assert gpus_in_order == sorted(gpus_in_order, key=gpus_in_order.index)  # grouped by GPU


def test_plan_filters_reference_configs_by_gpu_and_precision():
    b200 = plan(gpu="b200")
    assert [(r.nodes, r.fits) for r in b200] == [(1, False), (2, True), (2, True)]
    # Both vLLM shapes on 2x8 B200 (issue 55): the guide's DP16+EP16, vLLM's own TP16 cell;
    # the same weights per GPU under the planner's per-rank model.
    dp_ep, tp = b200[1:]
    assert (dp_ep.launch.tp, dp_ep.launch.dp, tp.launch.tp, tp.launch.dp) == (1, 16, 16, 1)
    assert tp.per_rank_resident_gb == dp_ep.per_rank_resident_gb
    assert any(n.startswith("vLLM's own recipe cell: TP16") for n in tp.notes)
    assert [r.gpus for r in plan(gpu="gb200", precision="bf16")] == [32, 72]


def test_plan_engine_override_collapses_duplicate_shapes():
    b300 = plan(gpu="b300", precision="mxfp4", engine="sglang")
    assert len(b300) == 1 and b300[0].launch.dp_attention


def test_plan_for_an_explicit_shape_sizes_every_precision():
    results = plan(gpu="h200", nodes=4, gpus_per_node=8)
    assert [r.precision for r in results] == ["mxfp4", "mxfp8", "bf16"]
    assert [r.fits for r in results] == [True, True, False]


def test_plan_without_nodes_picks_the_fewest_that_serve():
    (r,) = plan(gpu="h100", gpus_per_node=8, precision="mxfp4")
    assert (r.nodes, r.fits) == (4, True)
    (r,) = plan(gpu="h100", precision="bf16")  # no reference config: smallest serving shape
    assert r.fits and not size_config("h100", r.nodes - 1, 8, "bf16").fits


def test_plan_options_apply_to_every_row():
    results = plan(price_per_gpu_hour=2.0, mem_fraction_static=0.8)
    assert all(r.cost_per_hour == 2.0 * r.gpus for r in results)
    assert all(r.launch.static_fraction == 0.8 for r in results)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"gpu": "a100"},
        {"precision": "int4"},
        {"gpu": "h100", "nodes": 4, "engine": "trtllm"},
        {"nodes": 4},
        {"gpu": "h100", "nodes": 0},
        {"gpu": "h100", "nodes": 4, "mem_fraction_static": 1.5},
        {"gpu": "h100", "nodes": 4, "max_model_len": 0},
        {"gpu": "h100", "nodes": 4, "price_per_gpu_hour": -1},
    ],
)
def test_plan_rejects_bad_input(kwargs):
    with pytest.raises(ValueError):
        plan(**kwargs)


def test_fits_inventory_refuses_8x_b200_with_the_arithmetic():
    ok, message = fits_inventory("b200", 1, 8, "mxfp4")
    assert not ok
    for figure in ("1,536 GB", "1,560.94 GB", "short by ~25 GB", "205.9 GB", "2 x 8"):
        assert figure in message


def test_fits_inventory_accepts_4x8_h100_and_shows_the_pool():
    ok, message = fits_inventory("h100", 4, 8, "mxfp4", engine="sglang")
    assert ok
    assert "59.6 GB" in message and "3.6 GB KV pool" in message and "0.85" in message


def test_fits_inventory_refuses_a_static_fraction_that_leaves_no_pool():
    ok, message = fits_inventory("h100", 4, 8, "mxfp4", mem_fraction_static=0.75)
    assert not ok
    assert "raise it to at least 0.77" in message


def test_fits_inventory_of_reads_engine_and_fraction_from_an_inventory():
    from k3deploy.cluster.inventory import parse

    def inventory(gpu, nodes, engine, args=None, **engine_fields):
        return parse({
            "cluster": "t", "gpu": {"model": gpu, "count": 8}, "model": {"precision": "mxfp4"},
            "engine": {"kind": engine, "args": args or {}, **engine_fields},
            "nodes": [{"name": f"n{i}", "address": f"10.0.0.{10 + i}"} for i in range(nodes)],
        })

    assert fits_inventory_of(inventory("h100", 4, "sglang"))[0]
    assert not fits_inventory_of(inventory("h100", 4, "sglang", mem_fraction_static=0.75))[0]
    ok, message = fits_inventory_of(inventory("h100", 4, "sglang", {"mem-fraction-static": 0.75}))
    assert not ok and "0.77" in message
    ok, message = fits_inventory_of(inventory("b200", 1, "vllm"))
    assert not ok and "--gpu-memory-utilization 0.9" in message
    assert fits_inventory_of(inventory("b200", 2, "vllm"))[0]


def test_default_engine_follows_the_guide_layouts():
    assert size_config("h100", 4, 8).engine == "sglang"
    assert size_config("b300", 1, 8).engine == "vllm"
    assert size_config("b200", 2, 8).engine == "vllm"
    assert size_config("b300", 3, 8).engine == "sglang"  # vLLM layouts stop at two nodes
    notes = size_config("b300", 3, 8, engine="vllm").notes
    assert any("stop at 2 nodes" in n for n in notes)


def test_to_dict_is_json_and_rounded(h100_4x8):
    d = json.loads(json.dumps(h100_4x8.to_dict()))
    assert d["per_rank_resident_gb"] == 59.6 and d["launch"]["tp"] == 32
    assert isinstance(d["notes"], list)


# --- the GPU table ---


@pytest.mark.parametrize(
    "smi_name, key",
    [
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H100 PCIe", "h100"),
        ("NVIDIA H100 NVL", None),  # 94 GB: not the 80 GB row
        ("NVIDIA H200", "h200"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA B300 SXM6 AC", "b300"),
        ("NVIDIA GB200", "gb200"),
        ("NVIDIA GB300", None),  # must not match b300
        ("NVIDIA A100-SXM4-80GB", None),
    ],
)
def test_nvidia_smi_names_match_the_table(smi_name, key):
    gpu = match_smi_name(smi_name)
    assert (gpu.key if gpu else None) == key


def test_gpu_table_memory_and_fp4():
    assert {k: (get_gpu(k).memory_gb, get_gpu(k).fp4_native) for k in ("h100", "h200", "b200", "b300", "gb200")} == {
        "h100": (80, False), "h200": (141, False), "b200": (192, True), "b300": (288, True),
        "gb200": (186, True),
    }
    assert get_gpu(" B300 ").key == "b300"

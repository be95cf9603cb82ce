"""`k3deploy plan` output: the terminal table, the JSON document and the inventory skeleton."""

import ipaddress
import json
import re

import pytest
import yaml
from rich.console import Console

from k3deploy.cluster.inventory_skeleton import (
    engine_args,
    skeleton_for,
    skeleton_yaml,
)
from tests.unit.invdata import is_placeholder_address
from k3deploy.cli.plan_view import launch_text, render_table, to_json
from k3deploy.cluster.sizing import plan, size_config

# The per-config keys issue 5 promises for `plan --json`, typed here (not imported) so that
# dropping one from the code fails this test.
PROMISED_KEYS = {
    "gpu", "nodes", "gpus_per_node", "precision", "total_memory_gb", "checkpoint_gb", "fits",
    "headroom_gb", "headroom_per_gpu_gb", "experts_per_gpu", "min_gpus",
    "per_rank_resident_gb", "kv_pool_per_gpu_gb",
}
# ...and the ones the brief adds: launch shape, cost, notes.
EXTRA_KEYS = {"launch", "cost_per_hour", "notes", "engine"}
LAUNCH_KEYS = {"engine", "tp", "ep", "dp", "dp_attention"}


def rendered(results, width=160) -> str:
    console = Console(record=True, width=width)
    console.print(render_table(results))
    return console.export_text()


def line_of(text: str, *needles: str) -> str:
    """The one table row holding every needle (footnotes start with "[n]")."""
    rows = [ln for ln in text.splitlines() if not ln.lstrip().startswith("[")]
    lines = [ln for ln in rows if all(n in ln for n in needles)]
    assert len(lines) == 1, (needles, lines)
    return lines[0]


@pytest.fixture(scope="module")
def reference_text():
    return rendered(plan())


def test_table_shows_every_reference_config(reference_text):
    for label in ("4x8 H100", "4x8 H200", "8x B200", "2x8 B200", "8x B300", "2x8 B300",
                  "3x8 B300", "NVL72 slice, 16", "NVL72 slice, 32", "NVL72 rack, 72"):
        assert label in reference_text
    assert "Kimi K3 sizing" in reference_text


def test_table_h100_row_has_the_guide_figures(reference_text):
    row = line_of(reference_text, "4x8 H100", "mxfp4")
    for cell in ("sglang TP32 EP32 marlin", "2,560", "1,560.94", "yes", "999", "28", "59.6",
                 "3.6", "3.4", "20/28"):
        assert cell in row, cell


def test_table_b200_single_node_row_says_no_and_why(reference_text):
    row = line_of(reference_text, "8x B200", "mxfp4", "DP8 ")
    assert "NO" in row and "1,536" in row and "-25" in row
    refs = row.split()[-1].split(",")
    for ref in refs:  # every note number on the row has its footnote under the table
        assert f"[{ref}]" in reference_text
    assert "short by ~25 GB" in reference_text
    assert "naive 1.4 TB" in reference_text


def test_table_b300_rows_show_both_engines(reference_text):
    assert "743" in line_of(reference_text, "8x B300", "vllm DP8 EP8")
    assert "112" in line_of(reference_text, "8x B300", "sglang TP8 EP8 DP8 dp-attn")


def test_table_fits_160_columns_without_cutting_a_cell(reference_text):
    # rich never prints wider than its console: what can go wrong at 160 columns is a cell
    # cut short with an ellipsis, or a row wrapped onto a second line.
    assert "\u2026" not in reference_text and "..." not in reference_text
    for needle in ("4x8 H100", "8x B300", "8x B200", "2x8 B200"):
        assert sum(needle in ln for ln in reference_text.splitlines()) >= 1, needle


def test_notes_are_footnoted_once():
    text = rendered(plan(gpu="gb200"))
    assert text.count("no published bf16 checkpoint") == 1
    assert len(re.findall(r"^\[1\] ", text, flags=re.M)) == 1


def test_cost_column_only_with_a_price():
    assert "$" not in rendered(plan(gpu="h100"))
    text = rendered(plan(gpu="h100", price_per_gpu_hour=2.9))
    assert "$92.80" in line_of(text, "4x8 H100")


def test_launch_text_names_the_layout():
    assert launch_text(size_config("b200", 2, 8)) == "vllm DP16 EP16 mp"
    assert launch_text(size_config("b200", 2, 8, vllm_shape="tp")) == "vllm TP16 mp"
    assert launch_text(size_config("b300", 1, 8, engine="vllm")) == "vllm DP8 EP8"
    assert launch_text(size_config("h100", 4, 8, "mxfp8")) == "sglang TP32 EP32"


def test_json_has_every_required_key_for_every_config():
    doc = json.loads(json.dumps(to_json(plan(price_per_gpu_hour=3.0))))
    assert len(doc["configs"]) == len(plan())
    for config in doc["configs"]:
        missing = (PROMISED_KEYS | EXTRA_KEYS) - config.keys()
        assert not missing, (config["label"], missing)
        assert LAUNCH_KEYS <= config["launch"].keys()
        assert config["cost_per_hour"] == pytest.approx(3.0 * config["gpus"])
        assert isinstance(config["fits"], bool) and isinstance(config["notes"], list)


def test_json_figures_and_assumptions():
    doc = to_json(plan(gpu="h100"))
    (h100,) = doc["configs"]
    assert (h100["per_rank_resident_gb"], h100["kv_pool_per_gpu_gb"]) == (59.6, 3.6)
    assert h100["cost_per_hour"] is None
    assumptions = doc["assumptions"]
    assert assumptions["duplicated_stack_per_rank_gb"] == pytest.approx(10.82, abs=0.01)
    assert assumptions["kv_bytes_per_token"] is None  # the guide publishes none


# --- the inventory skeleton (shape: the Inventory section of docs/architecture.md) ---

TOP_KEYS = ["cluster", "model", "engine", "gpu", "ports", "paths", "ssh", "hf_token_env", "nodes"]
SECTION_KEYS = {
    "model": {"repo", "revision", "endpoint", "precision"},
    "engine": {"kind", "image", "container", "args", "env", "context_length"},
    "gpu": {"model", "count"},
    "ports": {"dist_init", "serve", "ray"},
    "paths": {"nvme", "hf_home", "docker_root"},
    "ssh": {"user", "port", "key", "known_hosts", "connect_timeout"},
}
NODE_KEYS = {"name", "address", "private_address", "nic"}


def launched() -> list:
    """The plan's rows k3deploy launches (vLLM's TP cell is shown, not launched)."""
    return [r for r in plan() if not (r.engine == "vllm" and r.launch.tp > 1)]


def test_the_vllm_tp_cell_has_no_skeleton():
    (tp,) = [r for r in plan() if r.engine == "vllm" and r.launch.tp > 1]
    with pytest.raises(ValueError, match="launches vLLM as DP\\+EP"):
        skeleton_for(tp)


@pytest.mark.parametrize("config", launched(), ids=lambda r: f"{r.label}-{r.precision}-{r.engine}")
def test_skeleton_has_the_architecture_shape(config):
    sk = skeleton_for(config)
    assert list(sk) == TOP_KEYS
    for section, keys in SECTION_KEYS.items():
        if section == "engine" and config.engine == "vllm" and config.nodes > 1:
            keys = keys | {"executor"}   # new multi-node vLLM inventories say mp
        assert set(sk[section]) == keys, section
    assert re.fullmatch(r"[a-z0-9][a-z0-9-]{0,40}", sk["cluster"])
    assert sk["engine"]["kind"] == config.engine
    assert sk["gpu"] == {"model": config.gpu, "count": config.gpus_per_node}
    assert sk["model"]["precision"] == config.precision
    assert len(sk["nodes"]) == config.nodes
    for i, node in enumerate(sk["nodes"]):
        assert set(node) == NODE_KEYS and node["name"] == f"node{i}"
        assert is_placeholder_address(node["address"])
        assert is_placeholder_address(node["private_address"])
        assert ipaddress.ip_address(node["private_address"]).version == 4
    assert len({n["address"] for n in sk["nodes"]}) == config.nodes


def test_skeleton_passes_the_inventory_validator():
    from k3deploy.cluster.inventory import parse

    for config in launched():
        inv = parse(skeleton_for(config))
        assert len(inv.nodes) == config.nodes and inv.engine.kind == config.engine


def test_skeleton_yaml_marks_the_placeholders_and_round_trips():
    config = size_config("b200", 2, 8)
    text = skeleton_yaml(config)
    assert "PLACEHOLDERS" in text.split("cluster:")[0]
    assert yaml.safe_load(text) == skeleton_for(config)
    assert "does not fit" in skeleton_yaml(size_config("b200", 1, 8))


def test_skeleton_context_length_defaults_to_the_guide_advice_not_1m():
    assert skeleton_for(size_config("b300", 1, 8))["engine"]["context_length"] == 131072
    chosen = size_config("b300", 1, 8, max_model_len=262144)
    assert skeleton_for(chosen)["engine"]["context_length"] == 262144


def test_skeleton_engine_args_only_carry_what_differs_from_the_builders():
    assert engine_args(size_config("h100", 4, 8)) == {}
    assert engine_args(size_config("h100", 4, 8, mem_fraction_static=0.88)) == {
        "mem-fraction-static": 0.88}
    # the builder decides the MoE backend from the precision as the planner does: no override
    assert engine_args(size_config("h200", 4, 8, "mxfp8")) == {}
    assert engine_args(size_config("b300", 1, 8, mem_fraction_static=0.92)) == {
        "gpu-memory-utilization": 0.92}


def test_skeleton_refuses_vllm_beyond_two_nodes():
    with pytest.raises(ValueError, match="at most 2 nodes"):
        skeleton_for(size_config("b300", 3, 8, engine="vllm"))


def test_placeholder_addresses_are_recognised():
    assert is_placeholder_address("192.0.2.10") and is_placeholder_address("203.0.113.11")
    assert not is_placeholder_address("10.0.0.10")
    assert not is_placeholder_address("node0.example.com")

"""scripts/recipe_cells.py and scripts/recipe_refresh.py on the fetched recipe pages under
tests/fixtures/recipes/pages/ (sources in its README.md): vLLM's K3 post (markdown), the SGLang
cookbook's cell table (jsx) and vLLM's recipes YAML."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

import recipe_cells
import recipe_refresh

PAGES = Path(__file__).resolve().parents[1] / "fixtures" / "recipes" / "pages"
POST = (PAGES / "2026-07-27-k3.md").read_text(encoding="utf-8")
JSX = (PAGES / "kimi-k3.cells.jsx").read_text(encoding="utf-8")
RECIPE = yaml.safe_load((PAGES / "Kimi-K3.yaml").read_text(encoding="utf-8"))
MULTI_NODE_TP = yaml.safe_load((PAGES / "multi_node_tp.yaml").read_text(encoding="utf-8"))
DSPARK = ('{"model":"Inferact/Kimi-K3-DSpark","method":"dspark","num_speculative_tokens":7,'
          '"attention_backend":"FLASHINFER_MLA","draft_sample_method":"probabilistic",'
          '"rejection_sample_method":"block"}')


def test_the_posts_serve_commands_and_only_those():
    cells = recipe_cells.markdown_cells(POST)
    # the quick start and the TP8 DSpark reproduction; vllm-bench and the bare
    # --speculative-config snippets are not serve commands
    assert len(cells) == 2
    assert cells[0] == {"engine": "vllm", "env": {}, "flags": {
        "": "moonshotai/Kimi-K3", "tensor-parallel-size": "8", "trust-remote-code": True,
        "load-format": "fastsafetensors", "enable-prefix-caching": True,
        "enable-auto-tool-choice": True, "tool-call-parser": "kimi_k3",
        "reasoning-parser": "kimi_k3"}}


def test_exports_before_a_command_are_its_environment():
    repro = recipe_cells.markdown_cells(POST)[1]
    assert repro["env"] == {"NCCL_DMABUF_ENABLE": "0", "VLLM_ALLREDUCE_USE_FLASHINFER": "1",
                            "VLLM_USE_RUST_FRONTEND": "1", "VLLM_ENGINE_READY_TIMEOUT_S": "3600",
                            "HEAD_ADDR": "127.0.0.1"}
    flags = repro["flags"]
    assert (flags["nnodes"], flags["node-rank"], flags["max-model-len"]) == ("2", "0", "auto")
    assert flags["speculative-config"] == DSPARK   # the shell quotes are gone, the JSON intact


def test_prefix_assignments_docker_env_and_launch_server():
    page = ("```bash\ndocker run --gpus all -e NCCL_CUMEM_ENABLE=1 --env HF_TOKEN=x img \\\n"
            "  python3 -m sglang.launch_server --model-path m --tp 8  # a comment\n```\n"
            "```sh\nSGLANG_K3_ATTN_RES_MODE=jit sglang serve --model-path m --enable-symm-mem\n```\n")
    first, second = recipe_cells.markdown_cells(page)
    assert first == {"engine": "sglang", "env": {"NCCL_CUMEM_ENABLE": "1", "HF_TOKEN": "x"},
                     "flags": {"model-path": "m", "tp": "8"}}
    assert second["env"] == {"SGLANG_K3_ATTN_RES_MODE": "jit"}
    assert second["flags"] == {"model-path": "m", "enable-symm-mem": True}


def test_a_multi_node_cookbook_cell_gets_the_renderers_trio_after_model_path():
    cell = recipe_cells.jsx_cell(JSX, {"hw": "h100", "pdMode": "unified",
                                       "strategy": "low-latency"})
    assert cell["nnodes"] == 4 and list(cell["flags"])[:5] == [
        "trust-remote-code", "model-path", "nnodes", "node-rank", "dist-init-addr"]
    assert cell["flags"]["dist-init-addr"] == "{{NODE0_IP}}:20000"
    assert cell["flags"]["moe-runner-backend"] == "marlin"
    assert cell["env"]["SGLANG_HOST_IP"] == "{{LOCAL_IP}}" and len(cell["env"]) == 8


def test_a_single_node_cell_and_a_missing_one():
    cell = recipe_cells.jsx_cell(JSX, {"hw": "b300", "pdMode": "unified",
                                       "strategy": "low-latency"})
    assert cell["nnodes"] == 1 and "nnodes" not in cell["flags"] and cell["env"] == {}
    assert cell["flags"]["tp-size"] == "8"
    with pytest.raises(LookupError, match="h100"):
        recipe_cells.jsx_cell(JSX, {"hw": "h100", "pdMode": "decode", "strategy": "balanced"})


def test_the_recipes_yaml_in_command_synthesis_order():
    head = recipe_cells.recipes_yaml_cell(RECIPE, MULTI_NODE_TP, "blackwell", nnodes=2,
                                          gpus_per_node=8, rank=0)
    flags = head["flags"]
    assert (flags["tensor-parallel-size"], flags["nnodes"], flags["node-rank"]) == ("16", "2", "0")
    assert "headless" not in flags and flags["master-addr"] == "$HEAD_IP"
    assert flags["load-format"] == "fastsafetensors" and flags["max-model-len"] == "1048576"
    assert "speculative-config" not in flags   # spec_decoding is an opt-in feature
    assert head["env"]["NCCL_SOCKET_IFNAME"] == "$IFACE_NAME"
    worker = recipe_cells.recipes_yaml_cell(RECIPE, MULTI_NODE_TP, "blackwell", nnodes=2,
                                            gpus_per_node=8, rank=1)
    assert worker["flags"]["headless"] is True and worker["flags"]["node-rank"] == "1"
    # every node's command: the rank and --headless as the page's placeholders
    every = recipe_cells.recipes_yaml_cell(RECIPE, MULTI_NODE_TP, "blackwell", nnodes=2,
                                           gpus_per_node=8)
    assert every["flags"]["node-rank"] == "{{NODE_RANK}}"
    assert every["flags"]["headless"] == recipe_cells.HEADLESS
    assert {k: v for k, v in every["flags"].items() if k not in ("node-rank", "headless")} == \
        {k: v for k, v in flags.items() if k != "node-rank"}
    # the hopper block repeats --gpu-memory-utilization after base_args: the last one wins
    hopper = recipe_cells.recipes_yaml_cell(RECIPE, MULTI_NODE_TP, "hopper", nnodes=4,
                                            gpus_per_node=8, rank=0)
    assert hopper["flags"]["gpu-memory-utilization"] == "0.97"


def test_refresh_reports_each_flag_and_variable_that_moved(tmp_path):
    recipes = tmp_path / "recipes"
    shutil.copytree(recipe_refresh.RECIPES, recipes, ignore=shutil.ignore_patterns("pages"))
    pages = tmp_path / "pages"
    shutil.copytree(PAGES, pages)
    assert recipe_refresh.refresh(pages, recipes) == []
    jsx = pages / "kimi-k3.cells.jsx"
    text = jsx.read_text(encoding="utf-8")
    text = text.replace('"--dist-timeout 3600",\n        "--reasoning-parser kimi_k3",',
                        '"--reasoning-parser kimi_k3",\n        "--enable-symm-mem",', 1)
    jsx.write_text(text.replace('"SGLANG_K3_ATTN_RES_MODE=jit",', '"SGLANG_K3_ATTN_RES_MODE=fused",', 1),
                   encoding="utf-8")
    assert recipe_refresh.refresh(pages, recipes) == [
        "sglang-cookbook-h100-4x8: 3 change(s)",
        "  - flag dist-timeout (was '3600')",
        "  + flag enable-symm-mem = True",
        "  ~ env SGLANG_K3_ATTN_RES_MODE: 'jit' -> 'fused'"]
    assert recipe_refresh.refresh(pages, recipes) == []

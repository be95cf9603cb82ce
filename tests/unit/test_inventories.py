"""The example inventories in inventories/: each loads, fits its GPUs by the sizing
arithmetic (what `up` and `check` refuse otherwise), and makes a launch on every node with
the layout the guide gives for that config."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from k3deploy import engines
from k3deploy.cluster import inventory, sizing
from k3deploy.engines import spec_from_inventory, vision
from k3deploy.steps import probes
from k3deploy.steps.engine.verify import vision_off
from tests.unit.invdata import is_placeholder_address

INVENTORIES = Path(__file__).resolve().parents[2] / "inventories"
SHA = "0123456789abcdef0123456789abcdef01234567"
# file -> (engine, nodes, GPU model, layout)
EXAMPLES = {
    "h100-4x8.yaml": ("sglang", 4, "h100", "tp-ep"),
    "h200-4x8.yaml": ("sglang", 4, "h200", "tp-ep"),
    "b300-1x8.yaml": ("vllm", 1, "b300", "dp-ep"),
    "b300-1x8-sglang.yaml": ("sglang", 1, "b300", "dp-attention"),
    "b200-2x8.yaml": ("vllm", 2, "b200", "dp-ep"),
}


def test_every_example_is_listed_here():
    assert sorted(p.name for p in INVENTORIES.glob("*.yaml")) == sorted(EXAMPLES)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_loads_and_fits(name):
    inv = inventory.load(INVENTORIES / name)
    kind, nodes, gpu, layout = EXAMPLES[name]
    assert (inv.engine.kind, len(inv.nodes), inv.gpu.model, inv.gpu.count) == (kind, nodes, gpu, 8)
    assert spec_from_inventory.layout_for(inv) == layout
    fits, message = sizing.fits_inventory_of(inv)
    assert fits, message
    # The guide's advice: the traffic maximum, not the 1M architectural ceiling.
    assert inv.engine.context_length == 131072
    # Placeholders that route nowhere until someone edits them in.
    assert all(is_placeholder_address(n.address) for n in inv.nodes)


def _argvs(inv) -> list[list[str]]:
    out = []
    for rank, node in inv.ranked():
        spec = spec_from_inventory.build(inv, node, rank, "img:tag", SHA, with_key=True)
        out += engines.node_launch_argvs(spec)
    return out


def _flag(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_b300_sglang_is_the_guides_single_node_shape_reachable_from_outside():
    (argv,) = _argvs(inventory.load(INVENTORIES / "b300-1x8-sglang.yaml"))
    for flag, value in [("--tp", "8"), ("--ep-size", "8"), ("--dp", "8"),
                        ("--context-length", "131072"), ("--host", "0.0.0.0")]:
        assert _flag(argv, flag) == value
    assert "--enable-dp-attention" in argv and "--nnodes" not in argv


def test_b300_vllm_is_dp8_ep8_with_parsers_and_max_model_len():
    (argv,) = _argvs(inventory.load(INVENTORIES / "b300-1x8.yaml"))
    assert _flag(argv, "--data-parallel-size") == "8" and "--enable-expert-parallel" in argv
    assert _flag(argv, "--max-model-len") == "131072" and _flag(argv, "--host") == "0.0.0.0"
    assert _flag(argv, "--tool-call-parser") == "kimi_k3" == _flag(argv, "--reasoning-parser")
    assert "--enable-auto-tool-choice" in argv and "--data-parallel-backend" not in argv


def b200_over_ray() -> inventory.Inventory:
    """The 2x8 B200 reference with engine.executor ray (what it ran before mp)."""
    doc = yaml.safe_load((INVENTORIES / "b200-2x8.yaml").read_text())
    doc["engine"]["executor"] = "ray"
    return inventory.parse(doc, str(INVENTORIES / "b200-2x8.yaml"))


def test_b200_runs_the_mp_executor_api_node_first_then_headless():
    """vLLM docs/serving/data_parallel_deployment.md, internal load balancing on two nodes."""
    inv = inventory.load(INVENTORIES / "b200-2x8.yaml")
    assert inv.engine.executor == "mp"
    api, headless = _argvs(inv)
    for argv in (api, headless):
        assert argv[:2] == ["docker", "run"] and argv[argv.index("--entrypoint") + 1] == "vllm"
        assert _flag(argv, "--data-parallel-size") == "16" and "--enable-expert-parallel" in argv
        assert _flag(argv, "--data-parallel-size-local") == "8"
        assert _flag(argv, "--data-parallel-address") == "192.0.2.10"
        assert _flag(argv, "--data-parallel-rpc-port") == str(inv.ports.dist_init)
        assert "--data-parallel-backend" not in argv and not any("ray" in t for t in argv)
    assert "--headless" not in api and "--data-parallel-start-rank" not in api
    assert "--headless" in headless and _flag(headless, "--data-parallel-start-rank") == "8"
    # The key only where the API is served.
    assert "--env-file" in api and "--env-file" not in headless
    assert "--env VLLM_HOST_IP=192.0.2.11" in " ".join(headless)


def test_b200_runs_ray_head_serve_and_one_worker():
    head, serve, worker = _argvs(b200_over_ray())
    assert head[-5:] == ["start", "--block", "--head", "--port=6379",
                         "--node-ip-address=192.0.2.10"]
    assert serve[:4] == ["docker", "exec", "-d", "k3"] and _flag(serve, "--data-parallel-size") == "16"
    assert "--address=192.0.2.10:6379" in worker
    log = "/k3deploy/serve-logs/vllm-serve.log"
    assert serve[4:7] == ["sh", "-c", f'"$@" >{log} 2>&1; echo "k3deploy: vllm serve exited with '
                          f'status $?" >>{log}']


def test_the_engine_log_over_ray_is_the_heads_serve_log_file():
    """Where each node's engine output is read from (launch, wait, collect-logs)."""
    ray, single = b200_over_ray(), inventory.load(INVENTORIES / "b300-1x8.yaml")
    work = ray.paths.work
    head = probes.engine_log(ray, True, tail=30)
    assert head.name == "log" and head.script == f"tail -n 30 {work}/serve-logs/vllm-serve.log"
    assert probes.engine_log(ray, True, name="serve").script == \
        f"cat {work}/serve-logs/vllm-serve.log"
    assert probes.engine_log(ray, False, tail=30).script == "docker logs --tail 30 k3"
    assert probes.engine_log(single, True).script == "docker logs k3"
    (mount,) = [t for t in _argvs(ray)[0] if "serve-logs" in t]
    assert mount == f"{work}/serve-logs:/k3deploy/serve-logs"


def test_h100_and_h200_are_the_same_tp32_shape():
    h100 = _argvs(inventory.load(INVENTORIES / "h100-4x8.yaml"))
    h200 = _argvs(inventory.load(INVENTORIES / "h200-4x8.yaml"))
    for argv in h100 + h200:
        assert _flag(argv, "--tp-size") == "32" and _flag(argv, "--moe-runner-backend") == "marlin"
    assert [_flag(a, "--node-rank") for a in h200] == ["0", "1", "2", "3"]


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_no_reference_launch_turns_the_vision_path_off(name):
    # verify's image probe must pass on every reference config: neither k3deploy's own flags
    # nor the example's engine.args may switch the vision path off.
    inv = inventory.load(INVENTORIES / name)
    assert vision_off(inv) == []
    for argv in _argvs(inv):
        assert vision.vision_off(inv.engine.kind, argv) == [], argv

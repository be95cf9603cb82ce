"""The layout / Ray decision (engines/layout.py), and that every caller agrees with it."""

import pytest

from k3deploy import engines
from k3deploy.cluster import inventory
from k3deploy.engines.layout import inventory_runs_over_ray, parallel_layout, runs_over_ray
from k3deploy.engines.spec_from_inventory import build, layout_for
from k3deploy.steps.engine import raylayout
from tests.unit.test_ray_layout import b200_doc


@pytest.mark.parametrize("engine,nnodes,executor,ray,layout", [
    ("vllm", 1, None, False, "dp-ep"),
    ("vllm", 1, "mp", False, "dp-ep"),
    ("vllm", 2, None, False, "dp-ep"),     # mp unless the inventory asks for Ray
    ("vllm", 2, "mp", False, "dp-ep"),
    ("vllm", 2, "ray", True, "dp-ep"),
    ("sglang", 1, None, False, "dp-attention"),
    ("sglang", 2, None, False, "tp-ep"),
    ("sglang", 4, None, False, "tp-ep"),
])
def test_layout_and_ray_by_engine_node_count_and_executor(engine, nnodes, executor, ray, layout):
    assert runs_over_ray(engine, nnodes, executor) is ray
    assert parallel_layout(engine, nnodes) == layout


@pytest.mark.parametrize("executor", [None, "mp", "ray"])
def test_the_inventory_side_and_the_spec_side_ask_the_same_function(executor):
    for kind, nodes in (("vllm", 1), ("vllm", 2), ("sglang", 1), ("sglang", 2)):
        inv = inventory.parse(b200_doc(nodes, kind, executor))
        ray = runs_over_ray(kind, nodes, inv.engine.executor)
        assert ray is (kind == "vllm" and nodes == 2 and executor == "ray")
        assert inventory_runs_over_ray(inv) is ray and raylayout.in_use(inv) is ray
        assert layout_for(inv) == parallel_layout(kind, nodes)
        for rank, node in inv.ranked():
            spec = build(inv, node, rank, "image", "a" * 40, with_key=False)
            assert engines.uses_ray(spec) is ray
            if kind == "vllm":   # what each node's container runs: Ray, or vLLM itself
                starts = [a[a.index("--entrypoint") + 1] for a in engines.node_launch_argvs(spec)
                          if a[:2] == ["docker", "run"]]
                assert starts == ["ray" if ray else "vllm"]


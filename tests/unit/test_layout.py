"""The layout / Ray decision (engines/layout.py), and that every caller agrees with it."""

import pytest

from k3deploy import engines
from k3deploy.cluster import inventory
from k3deploy.engines.layout import inventory_runs_over_ray, parallel_layout, runs_over_ray
from k3deploy.engines.spec_from_inventory import build, layout_for
from k3deploy.steps.engine import raylayout
from tests.unit.test_ray_layout import b200_doc


@pytest.mark.parametrize("engine,nnodes,ray,layout", [
    ("vllm", 1, False, "dp-ep"),
    ("vllm", 2, True, "dp-ep"),
    ("sglang", 1, False, "dp-attention"),
    ("sglang", 2, False, "tp-ep"),
    ("sglang", 4, False, "tp-ep"),
])
def test_layout_and_ray_by_engine_and_node_count(engine, nnodes, ray, layout):
    assert runs_over_ray(engine, nnodes) is ray
    assert parallel_layout(engine, nnodes) == layout


def test_the_inventory_side_and_the_spec_side_ask_the_same_function():
    for kind, nodes in (("vllm", 1), ("vllm", 2), ("sglang", 1), ("sglang", 2)):
        inv = inventory.parse(b200_doc(nodes, kind))
        ray = runs_over_ray(kind, nodes)
        assert inventory_runs_over_ray(inv) is ray and raylayout.in_use(inv) is ray
        assert layout_for(inv) == parallel_layout(kind, nodes)
        spec = build(inv, inv.head, 0, "image", "a" * 40, with_key=False)
        assert engines.uses_ray(spec) is ray


"""The static memory fraction has one home (engines/static_fraction.py): the inventory's and the
LaunchSpec's defaults, the planner's figure for an inventory, the launch argv and verify's
memory expectation all say the same number."""

from __future__ import annotations

from pathlib import Path

import pytest

from k3deploy import engines
from k3deploy.cluster import inventory, sizing
from k3deploy.engines import spec_from_inventory
from k3deploy.engines.static_fraction import FLAGS, inventory_static_fraction
from k3deploy.steps.engine import verify

INVENTORIES = sorted((Path(__file__).resolve().parents[2] / "inventories").glob("*.yaml"))
SHA = "0" * 40


def _with_args(inv, args: dict):
    data = inv.model_dump(mode="json")
    data["engine"]["args"] = {**data["engine"]["args"], **args}
    return inventory.parse(data, inv.source)


def _launched(inv) -> float | None:
    """The fraction in rank 0's engine argv; None when the engine's own default applies."""
    node = inv.head
    spec = spec_from_inventory.build(inv, node, inv.rank_of(node.name), "img:tag", SHA, True)
    flag = f"--{FLAGS[inv.engine.kind]}"
    argv = [a for cmd in engines.node_launch_argvs(spec) for a in cmd]
    return float(argv[argv.index(flag) + 1]) if flag in argv else None


@pytest.mark.parametrize("override", [None, 0.8])
@pytest.mark.parametrize("path", INVENTORIES, ids=lambda p: p.name)
def test_plan_launch_and_verify_use_one_fraction(path, override):
    inv = inventory.load(path)
    if override is not None:
        inv = _with_args(inv, {FLAGS[inv.engine.kind]: override})
    fraction = inventory_static_fraction(inv)
    launched = _launched(inv)
    # vLLM without an override runs at its own default, which is the planner's figure
    assert launched in (fraction, None)
    if launched is None:
        assert fraction == sizing.default_static_fraction(inv.engine.kind)
    assert verify.expected_used_mib(inv, 1000) == pytest.approx(fraction * 1000)
    fits = sizing.fits_inventory_of(inv)[1]
    assert f"{fraction:g}." in fits or not sizing.fits_inventory_of(inv)[0]


def test_the_defaults_are_the_guides_launch():
    inv = inventory.load(INVENTORIES[0])
    assert inventory.EngineSpec().mem_fraction_static == sizing.SGLANG_MEM_FRACTION_STATIC
    field = engines.LaunchSpec.__dataclass_fields__["mem_fraction_static"]
    assert field.default == sizing.SGLANG_MEM_FRACTION_STATIC
    assert inventory_static_fraction(inv) in (sizing.SGLANG_MEM_FRACTION_STATIC,
                                              sizing.VLLM_GPU_MEMORY_UTILIZATION)

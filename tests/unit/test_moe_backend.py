"""One MoE backend decision (cluster/moe_backend.py): `plan` (its JSON, as `plan --json` prints
it), the launch builder and the skeleton `plan --emit-inventory` writes all say the same
backend, for every reference inventory at every precision the planner accepts."""

from __future__ import annotations

from pathlib import Path

import pytest

from k3deploy import engines
from k3deploy.cli import plan_view
from k3deploy.cluster import inventory, sizing
from k3deploy.cluster.inventory_skeleton import skeleton_for
from k3deploy.engines import spec_from_inventory

INVENTORIES = sorted((Path(__file__).resolve().parents[2] / "inventories").glob("*.yaml"))
SHA = "0123456789abcdef0123456789abcdef01234567"


def _launch_backends(inv) -> set[str | None]:
    """The --moe-runner-backend value in every engine argv of every node (None: no flag)."""
    found = set()
    for rank, node in inv.ranked():
        spec = spec_from_inventory.build(inv, node, rank, "img:tag", SHA, with_key=True)
        for argv in engines.node_launch_argvs(spec):
            flag = "--moe-runner-backend"
            found.add(argv[argv.index(flag) + 1] if flag in argv else None)
    return found


def _plan_backend(inv) -> str | None:
    (result,) = sizing.plan(gpu=inv.gpu.model, nodes=len(inv.nodes),
                            gpus_per_node=inv.gpu.count, precision=inv.model.precision,
                            engine=inv.engine.kind)
    (config,) = plan_view.to_json([result])["configs"]
    return config["launch"]["moe_runner_backend"]


def _at(inv, precision: str):
    return inventory.parse(inv.model_dump(mode="json") | {
        "model": {**inv.model.model_dump(mode="json"), "precision": precision}}, inv.source)


@pytest.mark.parametrize("precision", list(sizing.CHECKPOINT_GB))
@pytest.mark.parametrize("path", INVENTORIES, ids=lambda p: p.name)
def test_plan_and_launch_say_the_same_backend(path, precision):
    inv = _at(inventory.load(path), precision)
    assert _launch_backends(inv) == {_plan_backend(inv)}


@pytest.mark.parametrize("precision", list(sizing.CHECKPOINT_GB))
@pytest.mark.parametrize("path", INVENTORIES, ids=lambda p: p.name)
def test_the_skeleton_launches_the_backend_plan_reports(path, precision):
    inv = inventory.load(path)
    (result,) = sizing.plan(gpu=inv.gpu.model, nodes=len(inv.nodes),
                            gpus_per_node=inv.gpu.count, precision=precision,
                            engine=inv.engine.kind)
    skeleton = inventory.parse(skeleton_for(result), "<skeleton>")
    assert _launch_backends(skeleton) == {result.launch.moe_runner_backend}


def test_marlin_is_for_mxfp4_on_gpus_without_fp4_tensor_cores():
    # the case: 4x8 H200 at mxfp8 has no 4-bit weights for marlin to dequantize
    inv = _at(inventory.load(Path(INVENTORIES[0]).parent / "h200-4x8.yaml"), "mxfp8")
    assert _launch_backends(inv) == {None} and _plan_backend(inv) is None
    h100 = inventory.load(Path(INVENTORIES[0]).parent / "h100-4x8.yaml")
    assert _launch_backends(h100) == {"marlin"} and _plan_backend(h100) == "marlin"

"""k3deploy plan: the sizing arithmetic as a table, JSON, or an inventory skeleton."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from k3deploy import plan_view, sizing
from k3deploy.errors import BadInputError


def run_plan(*, gpu, nodes, gpus_per_node, precision, engine, max_model_len,
             mem_fraction_static, price, emit_inventory, json_out) -> int:
    try:
        results = sizing.plan(gpu=gpu, nodes=nodes, gpus_per_node=gpus_per_node,
                              precision=precision, engine=engine, max_model_len=max_model_len,
                              mem_fraction_static=mem_fraction_static, price_per_gpu_hour=price)
    except ValueError as err:
        raise BadInputError(str(err), hint="k3deploy plan --help lists the options") from None
    if emit_inventory:
        _emit(results, emit_inventory)
    if json_out:
        print(json.dumps(plan_view.to_json(results), indent=1))
    else:
        Console(width=max(160, Console().width)).print(plan_view.render_table(results))
    return 0


def _emit(results, path: str) -> None:
    from k3deploy.inventory_skeleton import skeleton_yaml
    if len(results) != 1:
        raise BadInputError(f"--emit-inventory needs exactly one config, the arguments give "
                            f"{len(results)}", hint="name --gpu, --nodes, --gpus-per-node "
                            "and --precision")
    Path(path).write_text(skeleton_yaml(results[0]))

"""k3deploy plan: the sizing arithmetic as a table, JSON, or an inventory skeleton."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from k3deploy.cli import launch_contract, plan_view
from k3deploy.cluster import sizing
from k3deploy.core.errors import BadInputError


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
    warnings = [launch_contract.sizing_warnings(r) for r in results]
    if json_out:
        doc = plan_view.to_json(results)
        for config, found in zip(doc["configs"], warnings):
            config["engine_cli_warnings"] = found
        print(json.dumps(doc, indent=1))
    else:
        console = Console(width=max(160, Console().width))
        console.print(plan_view.render_table(results))
        _print_warnings(console, results, warnings)
    return 0


def _print_warnings(console, results, warnings) -> None:
    """Each engine CLI warning once, with the configs whose launch has it."""
    by_text: dict[str, list[str]] = {}
    for r, found in zip(results, warnings):
        for text in found:
            by_text.setdefault(text, []).append(r.label)
    if by_text:
        console.print(f"Engine CLI warnings (launch checked against "
                      f"{launch_contract.checked_against()}):", markup=False)
    for text, labels in by_text.items():
        console.print(f"  {', '.join(dict.fromkeys(labels))}: {text}", markup=False)


def _emit(results, path: str) -> None:
    from k3deploy.cluster.inventory_skeleton import skeleton_yaml
    if len(results) != 1:
        raise BadInputError(f"--emit-inventory needs exactly one config, the arguments give "
                            f"{len(results)}", hint="name --gpu, --nodes, --gpus-per-node "
                            "and --precision")
    Path(path).write_text(skeleton_yaml(results[0]))

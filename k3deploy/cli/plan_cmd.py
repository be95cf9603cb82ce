"""k3deploy plan: the sizing arithmetic as a table, JSON, or an inventory skeleton."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from k3deploy.cli import launch_contract, plan_view
from k3deploy.cluster import sizing
from k3deploy.cluster.sizing import SizingResult
from k3deploy.core.errors import BadInputError


def run_plan(*, gpu: str | None, nodes: int | None, gpus_per_node: int | None, precision: str | None,
             engine: str | None, max_model_len: int | None, mem_fraction_static: float | None,
             price: float | None, emit_inventory: str | None, json_out: bool,
             groups: int = 1) -> int:
    try:
        results = sizing.plan(gpu=gpu, nodes=nodes, gpus_per_node=gpus_per_node,
                              precision=precision, engine=engine, max_model_len=max_model_len,
                              mem_fraction_static=mem_fraction_static, price_per_gpu_hour=price)
    except ValueError as err:
        raise BadInputError(str(err), hint="k3deploy plan --help lists the options") from None
    if groups > 1 and not emit_inventory:
        raise BadInputError("--groups shapes the inventory plan writes", hint="add "
                            "--emit-inventory FILE (the sizing is per group either way)")
    if emit_inventory:
        _emit(results, emit_inventory, groups)
    warnings = [launch_contract.sizing_warnings(r) for r in results]
    if json_out:
        doc = plan_view.to_json(results)
        for config, found in zip(doc["configs"], warnings):
            config["engine_cli_warnings"] = [*found]   # a list of JSON, as the document holds
        print(json.dumps(doc, indent=1))
    else:
        console = Console(width=max(160, Console().width))
        console.print(plan_view.render_table(results))
        _print_warnings(console, results, warnings)
    return 0


def _print_warnings(console: Console, results: list[SizingResult], warnings: list[list[str]]) -> None:
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


def _emit(results: list[SizingResult], path: str, groups: int = 1) -> None:
    from k3deploy.cluster.fleet_skeleton import fleet_skeleton_yaml
    from k3deploy.cluster.inventory_skeleton import skeleton_yaml
    if len(results) != 1:
        raise BadInputError(f"--emit-inventory needs exactly one config, the arguments give "
                            f"{len(results)}", hint="name --gpu, --nodes, --gpus-per-node "
                            "and --precision")
    try:
        text = fleet_skeleton_yaml(results[0], groups) if groups > 1 \
            else skeleton_yaml(results[0])
    except ValueError as err:
        raise BadInputError(str(err)) from None
    Path(path).write_text(text)

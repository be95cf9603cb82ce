"""`engine.args` overrides checked against the engine's own option table at load time, so a
misspelt flag is exit 2 with a did-you-mean instead of a container that dies on start."""

from __future__ import annotations

from k3deploy.engines import cli_contract
from k3deploy.engines.inventory_view import InventoryView


def engine_arg_rules(inv: InventoryView) -> list[str]:
    out: list[str] = []
    for key, finding in cli_contract.check_flags(inv.engine.kind, inv.engine.args):
        if finding.level != "error":
            continue    # deprecations are warnings: `check` lists them
        if finding.suggestion:
            out.append(f"engine.args.{key}: not an option of {_label(inv)}; did you mean "
                       f"{finding.suggestion.removeprefix('--')!r}?")
        else:
            out.append(f"engine.args.{key}: {finding.message}")
    return out


def _label(inv: InventoryView) -> str:
    return cli_contract.load_table(inv.engine.kind).label

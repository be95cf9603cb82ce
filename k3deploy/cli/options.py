"""The options every command spells the same way, for cli/app.py and the command modules it
registers (cli/roll_cmd.py)."""

from __future__ import annotations

from typing import Annotated

import typer

Inv = Annotated[str, typer.Option("-i", "--inventory", help="inventory YAML file")]
Check = Annotated[bool, typer.Option("--check", help="plan and print; change nothing")]
AcceptNew = Annotated[bool, typer.Option("--accept-new-host-keys",
                                         help="trust and record unknown host keys (changed keys are still refused)")]
StateDir = Annotated[str | None, typer.Option("--state-dir", help="where per-node state files live")]
Json = Annotated[bool, typer.Option("--json", help="one JSON document on stdout")]
Group = Annotated[str | None, typer.Option("--group", help="a fleet: this group alone, not the router")]

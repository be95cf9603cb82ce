"""Every engine command line k3deploy would run for an inventory, checked against the
engines' own option tables (engines/cli_contract.py): what `check` and `plan` list as
warnings, and what the contract test holds to no errors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import yaml

from k3deploy import engines
from k3deploy.engines import spec_from_inventory
from k3deploy.engines import LaunchSpec, cli_contract, sglang_defaults
from k3deploy.engines.cli_contract import Finding

if TYPE_CHECKING:
    from k3deploy.cluster.inventory import Inventory
    from k3deploy.cluster.sizing import SizingResult

# The argv's shape does not depend on these: image and commit are chosen on the nodes.
_SAMPLE_SHA = "0" * 40
_SAMPLE_KEY = "k3deploy-sample-key"
_COMMANDS: dict[tuple[str, ...], str] = {("sglang", "serve"): "sglang", ("vllm", "serve"): "vllm",
                                         ("ray", "start"): "ray"}


def container_command(spec: LaunchSpec, argv: list[str]) -> list[str]:
    """The engine command inside a `docker run` (entrypoint + what follows the image) or a
    `docker exec` (what follows the container name)."""
    if argv[:2] == ["docker", "exec"]:
        rest = argv[2:]
        rest = rest[1:] if rest[:1] == ["-d"] else rest
        return engines.without_serve_log(rest[1:])
    cmd = argv[argv.index(spec.image) + 1:]
    head = argv[:argv.index(spec.image)]
    if "--entrypoint" in head:
        cmd = [head[head.index("--entrypoint") + 1], *cmd]
    return cmd


def engine_commands(spec: LaunchSpec) -> list[tuple[str, list[str]]]:
    """(table name, arguments after `sglang serve` / `vllm serve` / `ray start`) for each
    command this node's launch runs."""
    out = []
    for argv in engines.node_launch_argvs(spec):
        cmd = container_command(spec, argv)
        engine = _COMMANDS.get(tuple(cmd[:2]))
        if engine is None:
            raise ValueError(f"not an engine command k3deploy knows: {cmd[:3]}")
        out.append((engine, cmd[2:]))
    return out


def spec_findings(spec: LaunchSpec) -> list[Finding]:
    found = [f for engine, args in engine_commands(spec)
             for f in cli_contract.check_argv(engine, args)]
    if spec.engine == "sglang":   # the table is the newest release's; the image's may be older
        names = [a[2:].split("=", 1)[0] for _, args in engine_commands(spec) for a in args
                 if a.startswith("--")]
        found += [Finding("error", text.split()[0], text)
                  for text in sglang_defaults.refused(spec.image, names)]
    if spec.engine == "sglang" and spec.secrets_host_dir is not None:
        found += cli_contract.check_sglang_config(
            yaml.safe_load(engines.sglang_secret_config(_SAMPLE_KEY)))
    return found


def inventory_specs(inv: Inventory) -> list[LaunchSpec]:
    image = engines.inventory_image(inv, "13.0")
    return [spec_from_inventory.build(inv, node, rank, image, _SAMPLE_SHA,
                             with_key=inv.engine.require_api_key)
            for rank, node in inv.ranked()]


def inventory_findings(inv: Inventory) -> list[Finding]:
    """Findings over every node's launch, each distinct message once, in rank order."""
    seen: dict[str, Finding] = {}
    for spec in inventory_specs(inv):
        for finding in spec_findings(spec):
            seen.setdefault(finding.message, finding)
    return list(seen.values())


def checked_against() -> str:
    """'sglang serve 0.5.23, vllm serve 0.33.0, ray start 2.60.0'."""
    return ", ".join(cli_contract.load_table(e).label for e in cli_contract.ENGINES)


def warning_lines(inv: Inventory) -> list[str]:
    """What `check` prints before the preflight: each distinct warning once."""
    return [f"engine CLI warning: {f.message}" for f in inventory_findings(inv)
            if f.level == "warning"]


def sizing_warnings(result: SizingResult) -> list[str]:
    """Warnings for the launch of one `plan` row, through the inventory `plan
    --emit-inventory` would write for it (one path from a sized config to an argv)."""
    from k3deploy.cluster import inventory
    from k3deploy.cluster.inventory_skeleton import skeleton_yaml
    try:
        text = skeleton_yaml(result)
    except ValueError:   # a row shown for comparison (vLLM's TP cell): no launch to check
        return []
    inv = inventory.parse(yaml.safe_load(text))
    return [f.message for f in inventory_findings(inv) if f.level == "warning"]


def report_warnings(inv_path: str, *, log_json: bool) -> None:
    """Print an inventory's engine CLI warnings (a log event each with --log-json)."""
    from k3deploy.cluster import inventory
    from k3deploy.core import log as klog
    from k3deploy.run.ui import Ui
    lines = warning_lines(inventory.load(inv_path))
    for line in lines:
        if log_json:
            klog.get().warning("engine.cli_warning", warning=line)
        else:
            Ui().say(line)

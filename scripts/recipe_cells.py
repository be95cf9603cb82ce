"""Read the engines' own Kimi K3 recipe cells out of fetched copies of their pages, for
`scripts/engine-contract --recipes DIR` (tests/fixtures/recipes/ holds the snapshot the tests
read). Three page kinds, each read the way its site renders it:

- markdown with shell code blocks (vLLM's blog posts): `export VAR=...` lines, `VAR=... cmd`
  prefixes, `docker run -e/--env`, and the `vllm serve` / `sglang serve` /
  `python -m sglang.launch_server` command;
- the SGLang cookbook's cell table (sgl-project/sglang
  docs/src/snippets/configs/moonshotai/kimi-k3.jsx): a cell's `env` and `flags` string
  arrays, with the `--nnodes/--node-rank/--dist-init-addr` the page's renderer
  (docs/src/snippets/_deployment.jsx) splices in after `--model-path` when nnodes > 1;
- vLLM's recipes YAML (vllm-project/recipes models/<org>/<model>.yaml and strategies/),
  composed in the order src/lib/command-synthesis.js buildArgs uses, last value winning.
"""

from __future__ import annotations

import json
import re
import shlex

SERVE_HEADS = (("vllm", "serve"), ("sglang", "serve"), ("python", "-m", "sglang.launch_server"),
               ("python3", "-m", "sglang.launch_server"))
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_STRING = r'"(?:[^"\\]|\\.)*"'


def flags_of(args: list[str]) -> dict[str, object]:
    """`--name value`, `--name=value` and bare `--name` (True) as name -> value; a
    positional (the model of `vllm serve MODEL`) is kept under the key ''."""
    flags: dict[str, object] = {}
    i = 0
    while i < len(args):
        token = args[i]
        if not token.startswith("-"):
            flags.setdefault("", token)
            i += 1
            continue
        name, eq, value = token.lstrip("-").partition("=")
        if eq:
            flags[name] = value
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            flags[name] = args[i + 1]
            i += 1
        else:
            flags[name] = True
        i += 1
    return flags


def shell_commands(markdown: str) -> list[list[str]]:
    """Every command in the page's fenced code blocks, continuation lines joined, comments
    dropped, each split as a shell would."""
    commands = []
    for block in _FENCE.findall(markdown):
        text = re.sub(r"\\\n", " ", block)
        for line in text.splitlines():
            try:
                argv = shlex.split(line, comments=True)
            except ValueError:   # not shell (a JSON or Python block's quote left open)
                continue
            if argv:
                commands.append(argv)
    return commands


def _serve_args(argv: list[str]) -> list[str] | None:
    for head in SERVE_HEADS:
        for at in range(len(argv)):
            if tuple(argv[at:at + len(head)]) == head:
                return argv[at + len(head):]
    return None


def _docker_env(argv: list[str]) -> dict[str, str]:
    if argv[:2] != ["docker", "run"]:
        return {}
    env = {}
    for flag, value in zip(argv, argv[1:]):
        if flag in ("-e", "--env") and "=" in value:
            env.update([value.split("=", 1)])
    return env


def markdown_cells(markdown: str) -> list[dict]:
    """One {'engine', 'flags', 'env'} per serve command, in page order; `env` holds what the
    page exported before it, the command's own `VAR=...` prefixes and its docker `-e`s."""
    cells, exported = [], {}
    for argv in shell_commands(markdown):
        if argv[0] == "export":
            exported.update(a.split("=", 1) for a in argv[1:] if "=" in a)
            continue
        args = _serve_args(argv)
        if args is None:
            continue
        env = dict(exported)
        for token in argv:
            if not _ASSIGN.match(token):
                break
            env.update([token.split("=", 1)])
        env.update(_docker_env(argv))
        engine = "vllm" if "vllm" in argv else "sglang"
        cells.append({"engine": engine, "flags": flags_of(args), "env": env})
    return cells


def _string_array(block: str, key: str) -> list[str]:
    found = re.search(rf"\b{key}:\s*\[(.*?)\]", block, re.S)
    if found is None:
        return []
    return [json.loads(s) for s in re.findall(_STRING, found.group(1))]


def jsx_cell(text: str, match: dict[str, str]) -> dict:
    """The cookbook cell whose `match` is exactly `match` (hw, pdMode, strategy), rendered as
    the page renders it: env as given, flags with the multi-node trio spliced in."""
    wanted = ", ".join(f'{k}: "{v}"' for k, v in match.items())
    start = text.find(f"match: {{ {wanted} }}")
    if start < 0:
        raise LookupError(f"no cookbook cell matches {{ {wanted} }}")
    end = text.find("match:", start + 1)
    block = text[start:end if end > 0 else len(text)]
    found = re.search(r"\bnnodes:\s*(\d+)", block)
    nnodes = int(found.group(1)) if found else 1   # no nnodes: nothing to splice in
    flags = _string_array(block, "flags")
    if nnodes > 1 and not any(f.startswith("--nnodes") for f in flags):
        at = next(i for i, f in enumerate(flags) if f.startswith("--model-path")) + 1
        flags[at:at] = [f"--nnodes {nnodes}", "--node-rank {{NODE_RANK}}",
                        "--dist-init-addr {{NODE0_IP}}:20000"]
    argv = [t for f in flags for t in shlex.split(f)]
    env = dict(e.split("=", 1) for e in _string_array(block, "env"))
    return {"engine": "sglang", "nnodes": nnodes, "flags": flags_of(argv), "env": env}


def _dedupe_last_wins(args: list[str]) -> dict[str, object]:
    # command-synthesis.js keeps the last occurrence of a repeated flag (the recipes
    # comment on multi_node_tp_pp relies on it): a later block overrides an earlier one.
    return flags_of(args)


HEADLESS = "{{HEADLESS}}"   # the page's rule for a flag: present (bare) on every node but rank 0


def _multi_node_tp(total_gpus: int, nnodes: int, rank: int | None) -> list[str]:
    # buildArgs' multi-node TP/TEP branch: one command on every node, mp executor, rank > 0
    # --headless. rank None: the command for any node, its rank and headlessness as placeholders.
    args = ["--tensor-parallel-size", str(total_gpus), "--nnodes", str(nnodes),
            "--node-rank", "{{NODE_RANK}}" if rank is None else str(rank),
            "--master-addr", "$HEAD_IP"]
    if rank is None:
        return args + ["--headless", HEADLESS]
    return args + (["--headless"] if rank > 0 else [])


def recipes_yaml_cell(recipe: dict, strategy: dict, generation: str, *, nnodes: int,
                      gpus_per_node: int, rank: int | None = None) -> dict:
    """vLLM's recipes site command for a multi-node TP/TEP strategy: base_args, the
    strategy's args and parallel flags, the recipe's strategy_overrides, the hardware
    generation's overrides, then the features that are not opt-in."""
    name = strategy["name"]
    override = recipe.get("strategy_overrides", {}).get(name, {})
    hardware = recipe.get("hardware_overrides", {}).get(generation, {})
    opt_in = set(recipe.get("opt_in_features", []))
    args = [*recipe["model"].get("base_args", []), *strategy.get("vllm_args", []),
            *_multi_node_tp(nnodes * gpus_per_node, nnodes, rank),
            *override.get("extra_args", []), *hardware.get("extra_args", [])]
    for feature, spec in recipe.get("features", {}).items():
        if feature not in opt_in:
            args += spec.get("args", [])
    env = {**strategy.get("env", {}), **override.get("extra_env", {}),
           **hardware.get("extra_env", {})}
    flags = {"": recipe["model"]["model_id"], **_dedupe_last_wins(args)}
    return {"engine": "vllm", "nnodes": nnodes, "flags": flags,
            "env": {k: str(v) for k, v in env.items()}}

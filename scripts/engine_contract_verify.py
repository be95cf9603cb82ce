"""Hold k3deploy's launch checker to the real parsers. Runs INSIDE the throwaway virtualenv
of `scripts/engine-contract refresh`, with the repository on sys.path, after the tables
were written:

- every argv k3deploy generates for inventories/*.yaml (and for the engine.args overrides
  in tests/fixtures/engine-cli-cases.json) must parse with the real parser;
- every case in that file must get the real verdict it records (accepted / rejected);
- k3deploy's checker (engines/cli_contract.py, reading the new tables) must agree.

Exit 1 naming each disagreement.
"""
import argparse
import contextlib
import io
import json
import logging
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from k3deploy.cluster import inventory  # noqa: E402
from k3deploy.cli import launch_contract  # noqa: E402
from k3deploy.engines import cli_contract  # noqa: E402


def real_parsers():
    import engine_contract_dump as dump
    from sglang.srt.server_args import ServerArgs

    sglang = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(sglang)
    dump.cuda_like_platform()
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    return {"sglang": sglang, "vllm": make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))}


def cli_wrapper(engine, argv):
    """What `sglang serve` does to argv before its parser: take --model-type off, turn a
    leading positional into --model-path (sglang/cli/serve.py)."""
    if engine != "sglang":
        return argv
    from sglang.cli.serve import _extract_model_type_override, _normalize_positional_model_path
    _, argv = _extract_model_type_override(argv)
    return _normalize_positional_model_path(argv)[0]


def real_verdict(parsers, engine, argv):
    """None when the real CLI accepts argv, else its error line."""
    import click
    from ray.scripts.scripts import start
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            if engine == "ray":
                start.make_context("ray start", list(argv))
            else:
                parsers[engine].parse_args(cli_wrapper(engine, list(argv)))
        return None
    except SystemExit:
        return (err.getvalue().strip().splitlines() or ["exit"])[-1]
    except click.exceptions.ClickException as exc:
        return exc.format_message()


def generated(cases):
    """(label, engine, argv) for every launch of every reference inventory and override."""
    docs = {p.name: yaml.safe_load(p.read_text()) for p in sorted((ROOT / "inventories").glob("*.yaml"))}
    variants = [(name, doc) for name, doc in docs.items()]
    for override in cases["overrides"]:
        doc = json.loads(json.dumps(docs[override["inventory"]]))
        doc["engine"]["args"] = override["args"]
        variants.append((f"{override['inventory']} + {override['args']}", doc))
    for label, doc in variants:
        inv = inventory.parse(doc)
        for spec in launch_contract.inventory_specs(inv):
            for engine, argv in launch_contract.engine_commands(spec):
                yield label, engine, argv


def main():
    logging.disable(logging.CRITICAL)
    cases = json.loads((ROOT / "tests" / "fixtures" / "engine-cli-cases.json").read_text())
    parsers, bad, count = real_parsers(), [], 0
    checks = [(label, e, a, "accepted") for label, e, a in generated(cases)]
    checks += [("case", c["engine"], c["argv"], c["real"]) for c in cases["cases"]]
    for label, engine, argv, want in checks:
        count += 1
        real = real_verdict(parsers, engine, argv)
        mine = [f.message for f in cli_contract.check_argv(engine, argv) if f.level == "error"]
        got = "accepted" if real is None else "rejected"
        if got != want or bool(mine) != (real is not None):
            bad.append(f"{label}: {engine} {' '.join(argv)}\n  real: {real}\n  "
                       f"recorded: {want}\n  checker: {mine}")
    print("\n".join(bad) or f"verify: {count} argvs, the real parsers and k3deploy's checker agree")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

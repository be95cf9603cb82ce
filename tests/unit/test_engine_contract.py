"""Every launch k3deploy generates, checked against the real engines' option tables
(k3deploy/engines/cli_tables = tests/fixtures/engine-cli, from `scripts/engine-contract
refresh`): sglang serve, vllm serve and ray start, for every reference inventory and for
inventories with engine.args overrides; plus the checker itself and the load-time check."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import yaml

from k3deploy.cluster import inventory
from k3deploy.cli import launch_contract, plan_cmd
from k3deploy.engines import cli_contract
from k3deploy.core.errors import EXIT_BAD_INPUT, InventoryError

ROOT = Path(__file__).resolve().parents[2]
INVENTORIES = ROOT / "inventories"
# file -> the engine commands a launch runs over all its nodes
COMMANDS = {
    "h100-4x8.yaml": ["sglang"] * 4,
    "h200-4x8.yaml": ["sglang"] * 4,
    "b300-1x8.yaml": ["vllm"],
    "b300-1x8-sglang.yaml": ["sglang"],
    "b200-2x8.yaml": ["vllm", "vllm"],   # engine.executor mp: the API node, then headless
}
# argvs with the real parsers' verdicts, and overrides a user could write (engine.args);
# `scripts/engine-contract refresh` runs both through the real parsers.
CASES = json.loads((ROOT / "tests" / "fixtures" / "engine-cli-cases.json").read_text())
OVERRIDES = [(o["inventory"], o["args"]) for o in CASES["overrides"]]
REJECTED = [(c["engine"], c["argv"], c["checker_says"]) for c in CASES["cases"]
            if c["real"] == "rejected"]
ACCEPTED = [(c["engine"], c["argv"]) for c in CASES["cases"] if c["real"] == "accepted"]


def load_doc(name: str) -> dict:
    return yaml.safe_load((INVENTORIES / name).read_text())


def errors(findings) -> list[str]:
    return [f.message for f in findings if f.level == "error"]


def test_every_reference_inventory_is_covered():
    assert sorted(p.name for p in INVENTORIES.glob("*.yaml")) == sorted(COMMANDS)


def test_tables_carry_the_pinned_engine_versions():
    pins = dict(re.findall(r'^[A-Z]+ = "(sglang|vllm|ray)==([\d.]+)"',
                           (ROOT / "scripts" / "engine-contract").read_text(), re.M))
    versions = {e: cli_contract.load_table(e).version for e in cli_contract.ENGINES}
    assert versions == pins == {"sglang": "0.5.23", "vllm": "0.33.0",
                                               "ray": "2.60.0"}
    for engine in cli_contract.ENGINES:
        doc = json.loads((ROOT / "tests" / "fixtures" / "engine-cli" / f"{engine}.json").read_text())
        assert doc["version"] == pins[engine] and doc["environment"]["stubs"] == []
    assert launch_contract.checked_against() == (
        "sglang serve 0.5.23, vllm serve 0.33.0, ray start 2.60.0")


def test_the_fixtures_are_the_package_tables_one_copy():
    assert (ROOT / "tests" / "fixtures" / "engine-cli").resolve() == cli_contract.TABLE_DIR


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_generated_launch_parses_with_the_real_tables(name):
    inv = inventory.load(INVENTORIES / name)
    specs = launch_contract.inventory_specs(inv)
    commands = [(e, args) for s in specs for e, args in launch_contract.engine_commands(s)]
    assert [e for e, _ in commands] == COMMANDS[name]
    for engine, args in commands:
        assert errors(cli_contract.check_argv(engine, args)) == [], (engine, args)
    assert errors(launch_contract.inventory_findings(inv)) == []


@pytest.mark.parametrize("name", ["h100-4x8.yaml", "b300-1x8-sglang.yaml"])
def test_the_sglang_secret_config_reaches_the_config_merger_as_api_key(name):
    (spec, *_) = launch_contract.inventory_specs(inventory.load(INVENTORIES / name))
    (_, args), = launch_contract.engine_commands(spec)[:1]
    assert args[-2:] == ["--config", "/k3deploy/secrets/sglang-secret.yaml"]
    mapping = yaml.safe_load(launch_contract.engines.sglang_secret_config("sk-x"))
    assert cli_contract.check_sglang_config(mapping) == []
    example = cli_contract.load_table("sglang").config_merger["example"]
    assert list(mapping) == list(example["yaml"]) and example["dest"] == "api_key"


@pytest.mark.parametrize("name,overrides", OVERRIDES)
def test_launches_with_engine_args_overrides_parse(name, overrides):
    doc = load_doc(name)
    doc["engine"]["args"] = overrides
    inv = inventory.parse(doc)
    assert errors(launch_contract.inventory_findings(inv)) == []
    argv = [a for s in launch_contract.inventory_specs(inv)
            for _, args in launch_contract.engine_commands(s) for a in args]
    for flag, value in overrides.items():
        assert (f"--{flag}" in argv) == (value is not None)


@pytest.mark.parametrize("engine,argv,expected", REJECTED)
def test_the_checker_rejects_what_the_real_parser_rejects(engine, argv, expected):
    found = errors(cli_contract.check_argv(engine, argv))
    assert len(found) == 1 and expected in found[0], found


@pytest.mark.parametrize("engine,argv", ACCEPTED)
def test_the_checker_accepts_what_the_real_parser_accepts(engine, argv):
    assert errors(cli_contract.check_argv(engine, argv)) == []


def test_deprecated_and_abbreviated_guide_flags_are_warnings_not_errors():
    inv = inventory.load(INVENTORIES / "b300-1x8-sglang.yaml")
    lines = launch_contract.warning_lines(inv)
    assert any("--enable-dp-attention" in line and "Use '--attn-dp-size <dp-size>' instead"
               in line for line in lines)
    assert any("abbreviation of --tp-size" in line for line in lines)
    assert errors(launch_contract.inventory_findings(inv)) == []


def test_check_prints_the_warnings(capsys):
    launch_contract.report_warnings(str(INVENTORIES / "b300-1x8-sglang.yaml"), log_json=False)
    err = capsys.readouterr().err
    assert "engine CLI warning: sglang serve 0.5.23: --enable-dp-attention" in err


def test_plan_lists_the_warnings_per_config(capsys):
    assert plan_cmd.run_plan(gpu="b300", nodes=1, gpus_per_node=8, precision="mxfp4",
                             engine="sglang", max_model_len=None, mem_fraction_static=None,
                             price=None, emit_inventory=None, json_out=True) == 0
    (config,) = json.loads(capsys.readouterr().out)["configs"]
    assert any("--enable-dp-attention" in w for w in config["engine_cli_warnings"])
    plan_cmd.run_plan(gpu="h100", nodes=4, gpus_per_node=8, precision="mxfp4",
                      engine="sglang", max_model_len=None, mem_fraction_static=None,
                      price=None, emit_inventory=None, json_out=False)
    assert "Engine CLI warnings" not in capsys.readouterr().out


@pytest.mark.parametrize("kind,args,problem", [
    ("sglang", {"tp-szie": 8}, "engine.args.tp-szie: not an option of sglang serve 0.5.23; "
     "did you mean 'tp-size'?"),
    ("vllm", {"max-mode-len": 8192}, "engine.args.max-mode-len: not an option of vllm serve "
     "0.33.0; did you mean 'max-model-len'?"),
    ("sglang", {"moe-runner-backend": "nope"}, "engine.args.moe-runner-backend: sglang serve "
     "0.5.23: argument --moe-runner-backend: invalid choice: 'nope'"),
    ("sglang", {"trust-remote-code": "yes"}, "engine.args.trust-remote-code: sglang serve "
     "0.5.23: --trust-remote-code takes no value"),
    ("vllm", {"max-num-batched-tokens": True}, "engine.args.max-num-batched-tokens: vllm "
     "serve 0.33.0: argument --max-num-batched-tokens: expected one argument"),
])
def test_engine_args_are_checked_when_the_inventory_loads(kind, args, problem):
    doc = load_doc("b300-1x8.yaml" if kind == "vllm" else "b300-1x8-sglang.yaml")
    doc["engine"]["args"] = args
    with pytest.raises(InventoryError) as err:
        inventory.parse(copy.deepcopy(doc))
    assert err.value.exit_code == EXIT_BAD_INPUT
    assert any(p.startswith(problem) for p in err.value.problems), err.value.problems


def test_sglang_config_keys_as_its_merger_reads_them():
    assert cli_contract.check_sglang_config({"api-key": "k", "tp-size": 8}) == []
    (bad,) = cli_contract.check_sglang_config({"api_key": "k"})
    assert "unrecognized arguments: --api_key; did you mean --api-key?" in bad.message
    unsupported = cli_contract.load_table("sglang").config_merger["unsupported_keys"][0]
    (refused,) = cli_contract.check_sglang_config({unsupported: "x"})
    assert "Unsupported config option" in refused.message


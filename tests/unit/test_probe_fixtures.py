"""Every probe in k3deploy/facts, in pyinfra's two halves: the command it runs, and what its
parser makes of a real transcript (tests/fixtures/real/), each case a file in
tests/fixtures/probes/: {"probe": "module.function", "args": [...], "command": the script,
"output": a path under tests/fixtures/real/, or {"text", "source"} for an output a transcript
cannot hold (nothing printed, an exit code only) with where its form comes from,
"exit": the exit code, "fact": the parsed value as JSON (a dataclass as its fields, a tuple as
a list)}. A probe function with no case fails the coverage test."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import pkgutil
from pathlib import Path

import pytest

import k3deploy.facts as facts_pkg
from k3deploy.facts import Probe

ROOT = Path(__file__).resolve().parents[2]
CASES = sorted((ROOT / "tests" / "fixtures" / "probes").glob("*.json"))
REAL = ROOT / "tests" / "fixtures" / "real"


def as_json(value):
    """A parsed fact as the fixtures spell it."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: as_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [as_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): as_json(v) for k, v in value.items()}
    return value


def probe_functions() -> dict[str, object]:
    """module.function -> every function of k3deploy/facts/* that returns a Probe."""
    found = {}
    for info in pkgutil.iter_modules(facts_pkg.__path__):
        module = importlib.import_module(f"k3deploy.facts.{info.name}")
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            returns = str(fn.__annotations__.get("return", ""))
            if fn.__module__ == module.__name__ and returns.startswith("Probe"):
                found[f"{info.name}.{name}"] = fn
    return found


def output_of(case: dict) -> str:
    out = case["output"]
    return out["text"] if isinstance(out, dict) else (REAL / out).read_text()


def test_every_probe_has_a_case_from_a_real_transcript():
    cases = [json.loads(p.read_text()) for p in CASES]
    assert set(probe_functions()) <= {c["probe"] for c in cases}, \
        set(probe_functions()) - {c["probe"] for c in cases}
    for case in cases:
        assert isinstance(case["output"], dict) or (REAL / case["output"]).is_file(), case


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_probe(path):
    case = json.loads(path.read_text())
    probe = probe_functions()[case["probe"]](*case.get("args", []))
    assert isinstance(probe, Probe)
    assert probe.script == case["command"]
    assert as_json(probe.parse(output_of(case), case["exit"])) == case["fact"]

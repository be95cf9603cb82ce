"""The launch family's typed facts (steps/engine/launch_look.py LaunchFacts and the Facts of ray-cluster,
wait, the dry-fire steps and compile-cache-seal built on it): from the probes' values as the
runner gives them, strict about their fields in fixtures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from k3deploy import engines
from k3deploy.facts import UnknownFact, http
from k3deploy.facts.nvidia_smi import parse_gpus
from k3deploy.steps.engine.compile_cache_seal import SealCompileCache
from k3deploy.steps.dry_fire.dry_fire import DryFireLaunch
from k3deploy.steps.engine.launch import LaunchEngine
from k3deploy.steps.engine.wait import WaitHealthy
from tests.realfix import real
from tests.unit import typed
from tests.unit.docker_facts import container
from tests.unit.looked import looked
from tests.unit.test_step_fixtures import node_ctx

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "steps"


def fixture_facts(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())["facts"]


@pytest.mark.parametrize("step, fixture, wrong", [
    (LaunchEngine, "launch-done", "key_file_sh"),             # misspelt
    (LaunchEngine, "launch-vllm-over-ray-head-serving", "healthy"),   # derived from `health`
    (WaitHealthy, "wait-head-loading", "answers"),            # derived from `health`
    (DryFireLaunch, "dry-fire-launch-fresh", "small_mising"),
])
def test_a_misspelt_or_derived_field_in_a_fixture_fails(step, fixture, wrong):
    doc = fixture_facts(fixture)
    assert typed.facts(step, doc)
    with pytest.raises(UnknownFact, match=wrong):
        typed.facts(step, {**doc, wrong: None})


def test_the_wait_sums_each_ranks_gpus_from_nvidia_smi(tmp_path):
    ctx = node_ctx({"rank": 0}, tmp_path)
    gpus = parse_gpus(real("nvidia-smi/565.57.01/h100-8x-q.txt"), 0)
    warming = http.Endpoint(health=http.Answer(503))
    facts = looked(WaitHealthy(), ctx, waiting=True, container=container(), gpus=gpus,
                   health=warming)
    assert facts.gpu_used_mib == 8 * 1
    assert facts.answers and not facts.healthy
    quiet = looked(WaitHealthy(), ctx, container=container())   # not waiting: no log, no GPUs
    assert quiet.gpu_used_mib is None and quiet.log is None and not quiet.answers


def test_the_dry_fire_knows_the_real_config_and_what_passed_here(tmp_path):
    ctx = node_ctx({"rank": 1}, tmp_path)
    real_config = looked(LaunchEngine(), ctx, cuda="13.0").spec.labels[engines.CONFIG_LABEL]
    fresh = looked(DryFireLaunch(), ctx, cuda="13.0")
    assert fresh.real_config == real_config != fresh.spec.labels[engines.CONFIG_LABEL]
    assert DryFireLaunch().due(fresh, ctx)
    passed = looked(DryFireLaunch(), ctx, cuda="13.0",
                    dry_fire_passed=(fresh.spec.labels[engines.CONFIG_LABEL],))
    assert not DryFireLaunch().due(passed, ctx) and DryFireLaunch().plan(passed, ctx) == []
    # a dry-fire passed with another configuration (an earlier inventory) is no pass
    other = looked(DryFireLaunch(), ctx, cuda="13.0", dry_fire_passed=(real_config,))
    assert DryFireLaunch().due(other, ctx)


def test_the_seal_seals_the_launchs_own_cache(tmp_path):
    ctx = node_ctx({"rank": 0}, tmp_path)
    launch = looked(LaunchEngine(), ctx, cuda="13.0", driver="580.65.06")
    seal = looked(SealCompileCache(), ctx, cuda="13.0", driver="580.65.06")
    assert seal.spec == launch.spec and seal.key_inputs == launch.key_inputs
    assert seal.compile_caches == {}

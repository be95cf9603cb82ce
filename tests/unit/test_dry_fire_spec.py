"""The dry-fire's pure parts: its spec (the real launch's plus dummy weights, same compile
cache key), the phases read from SGLang's log lines (real transcripts), the manifest's order."""

from __future__ import annotations

from pathlib import Path

from k3deploy import engines
from k3deploy.cluster.hubmeta import Manifest, RepoFile
from k3deploy.engines import compile_cache_key as cc
from k3deploy.engines import dry_fire, startup_phases
from tests.unit.docker_facts import container
from tests.unit.looked import looked
from tests.unit.test_step_fixtures import node_ctx

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "sglang" / "0.5.16"


def test_the_dry_fire_runs_the_real_argv_plus_dummy_weights_with_the_same_cache_key(tmp_path):
    from k3deploy.steps.dry_fire.dry_fire import DryFireLaunch
    from k3deploy.steps.engine.launch import LaunchEngine
    ctx = node_ctx({"rank": 1}, tmp_path)
    real = looked(LaunchEngine(), ctx, cuda="13.0")
    dry = looked(DryFireLaunch(), ctx, cuda="13.0")
    assert dry.real_config == real.spec.labels[engines.CONFIG_LABEL]
    (real, real_key), (dry, dry_key) = ((f.spec, f.key_inputs) for f in (real, dry))
    real_argv, dry_argv = (engines.node_launch_argvs(s)[0] for s in (real, dry))
    i = dry_argv.index("--load-format")
    assert dry_argv[i + 1] == "dummy" and "--load-format" not in real_argv
    assert cc.cache_key(dry_key) == cc.cache_key(real_key)
    assert dry.compile_cache_host_dir == real.compile_cache_host_dir
    assert dry.labels[engines.CONFIG_LABEL] != real.labels[engines.CONFIG_LABEL]
    assert dry_fire.is_dry_fire(container(labels=dict(dry.labels)))
    assert not dry_fire.is_dry_fire(container(labels=dict(real.labels)))


def test_phases_from_sglangs_own_stamped_lines():
    log = (REAL / "group-formed.txt").read_text() + (REAL / "ready.txt").read_text()
    assert startup_phases.phases(log) == {"distributed_init": 7.0, "to_ready": 147.0}


def test_the_manifest_lists_the_small_files_before_the_shards():
    files = tuple(RepoFile(p, 1, "a" * 64 if p.endswith(".safetensors") else None, "b" * 40)
                  for p in ("config.json", "model-00001-of-00002.safetensors",
                            "model-00002-of-00002.safetensors", "model.safetensors.index.json",
                            "tokenizer_config.json"))
    order = [f["path"] for f in Manifest("o/m", "main", "c" * 40, None, files).to_json()["files"]]
    assert order == ["config.json", "model.safetensors.index.json", "tokenizer_config.json",
                     "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]

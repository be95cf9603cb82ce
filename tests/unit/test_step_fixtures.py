"""Every registered step from fixtures, like pyinfra's operation fixtures:
tests/fixtures/steps/*.json, each {"step", "inventory_file" (a reference inventory under
inventories/, optional), "inventory" (overrides, optional), "rank", "params" (the playbook's
`with:`), "options", "facts", "expect", "source" (where a value in the facts comes from)}.

Facts in (as the step's observe gives them, typed where the fact is: TYPED), actions or
problems out; no SSH. `expect` is
exact: {"actions": [shown lines]}, {"action_descriptions": [...]} (for argvs too long to spell
out), {"problems": [[kind, a fragment of the message], ...]} in order, or {"error": a fragment
of the StepFailed the plan raises}; an empty list means "nothing to do". "step" is a registry
name (the step's plan, or its problems when problems are expected) or one of the finer rules
below (COVERS names the step each belongs to)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest
import yaml

from k3deploy.cluster import inventory
from k3deploy.cluster.hubmeta import Manifest, RepoFile
from k3deploy.core.errors import StepFailed
from k3deploy.engines import CONFIG_LABEL
from k3deploy.facts.docker import Container
from k3deploy.node.run_inputs import RunInputs
from k3deploy.node.context import NodeContext, RunContext
from k3deploy.steps import REGISTRY, step_class
from k3deploy.steps.launch import LaunchEngine, secret_file
from k3deploy.steps.preflight import Preflight
from k3deploy.steps.verify import memory_problems
from k3deploy.steps.wait import rank_problem
from k3deploy.steps.base import NoFacts
from tests.unit.fakes import FakeSession
from tests.unit.typed import facts as typed_facts
from tests.unit.invdata import four_nodes

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "steps"
CASES = sorted(FIXTURES.glob("*.json"))
KEY = "k3-testkey-0123456789"
GB = 10**9


def manifest(total_bytes: int) -> Manifest:
    return Manifest("moonshotai/Kimi-K3", "main", "a" * 40, None,
                    (RepoFile("model-00001-of-00096.safetensors", total_bytes, "b" * 64, "c" * 40),))


def inventory_doc(case: dict) -> dict:
    if "inventory_file" not in case:
        return four_nodes(**case.get("inventory", {}))
    doc = yaml.safe_load((ROOT / "inventories" / case["inventory_file"]).read_text())
    return {**doc, **case.get("inventory", {})}


def node_ctx(case: dict, tmp_path) -> NodeContext:
    inv = inventory.parse(inventory_doc(case))
    m = manifest(int(case.get("checkpoint_gb", 1000) * GB))
    logs = Path(case["logs_dir"]) if "logs_dir" in case else None   # collect-logs' prepare
    inputs = RunInputs(manifest=m, manifest_json=json.dumps(m.to_json(4)), api_key=KEY,
                       token=None, settled=frozenset({"token"}), logs_dir=logs)
    run = RunContext(inv=inv, session=FakeSession(inv, tmp_path), options=case.get("options", {}),
                     inputs=inputs)
    rank = case.get("rank", 0)
    return NodeContext(run, inv.ranked()[rank][1], rank)


def preflight(facts, ctx, case):
    return Preflight().problems(facts, ctx)


def preflight_cluster(facts, ctx, case):
    """Every checked node reports the same facts; a node left out of "checked" could not be
    reached. Without hub_client in the facts the port check (which needs SSH) is not run."""
    checked = case.get("checked", [n.name for n in ctx.inv.nodes])
    rows = Preflight().cluster_problems({n: dict(facts) for n in checked}, ctx.run)
    return [(f"{node}:{kind}", message) for node, kind, message in rows]


def ranks(facts, ctx, case):
    expected = {node.name: rank for rank, node in ctx.inv.ranked()}
    found = rank_problem(facts["cmds"], expected)
    return [] if found is None else [("ranks", found[0]), ("stray", ", ".join(found[1]))]


def memory(facts, ctx, case):
    return memory_problems(facts["gpus"], ctx.inv, ctx.rank)


def launch_facts(facts, ctx) -> dict:
    """The launch's facts with what only the code computes from this inventory: the spec and
    the compile cache key's inputs, always; "<config>" (a container label), "<key-file>" (the
    key file's hash) and "<cache-key>" (a compile-cache dir's key) stand for those values, so a
    done node is one whose container, file or cache match them."""
    spec, key_inputs = LaunchEngine().spec_and_cache_key(facts, ctx)
    container = facts.get("container")
    if container and container.labels.get(CONFIG_LABEL) == "<config>":
        container = dataclasses.replace(container, labels={CONFIG_LABEL: spec.labels[CONFIG_LABEL]})
    key_sha = facts.get("key_file_sha")
    if key_sha == "<key-file>":
        key_sha = hashlib.sha256(secret_file(spec)[1](KEY).encode()).hexdigest()
    key = (spec.compile_cache_host_dir or "").rsplit("/", 1)[-1]
    caches = {key if k == "<cache-key>" else k: v for k, v in facts.get("compile_caches", {}).items()}
    return {**facts, "spec": spec, "key_inputs": key_inputs, "container": container,
            "key_file_sha": key_sha, "compile_caches": caches}


def launch_plan(facts, ctx, case):
    """launch and the steps that share its spec (ray-cluster starts the same containers,
    compile-cache-seal seals the launch's cache)."""
    step = step_class(case["step"])(case.get("params"))
    return step.plan(launch_facts(facts, ctx), ctx)


def dry_fire_launch_plan(facts, ctx, case):
    """dry-fire-launch and dry-fire-ray-cluster: the launch's facts for the dummy-weights spec;
    "<dry-config>" stands for that spec's config label, "<config>" for the real launch's."""
    step = step_class(case["step"])(case.get("params"))
    step._launched = set()
    spec, key_inputs = step.spec_and_cache_key(facts, ctx)
    real = LaunchEngine().spec(facts, ctx).labels[CONFIG_LABEL]
    facts = launch_facts(facts, ctx)   # the real spec's values for "<config>", "<key-file>"
    container = facts.get("container")
    if container and container.labels.get(CONFIG_LABEL) == "<dry-config>":
        container = dataclasses.replace(container, labels={**container.labels,
                                                           CONFIG_LABEL: spec.labels[CONFIG_LABEL]})
    return step.plan({**facts, "spec": spec, "key_inputs": key_inputs, "container": container,
                      "real_config": real,
                      "dry_fire_passed": facts.get("dry_fire_passed", False)}, ctx)


def guard_facts(facts, ctx, case):
    """"<digest>" in the guard's state stands for this inventory's guard config digest."""
    step = step_class("guard")(case.get("params"))
    state = facts.get("guard_state")
    if state and state.get("digest") == "<digest>":
        facts = {**facts, "guard_state": {**state, "digest": step.config(ctx)["digest"]}}
    return step.plan(facts, ctx)


def registered(facts, ctx, case):
    """A registered step as the runner asks it: its problems (read-only findings), else its plan."""
    step = step_class(case["step"])(case.get("params"))
    facts = step_facts(step, facts)
    if "problems" in case["expect"]:
        return step.problems(facts, ctx)
    return step.plan(facts, ctx)


def step_facts(step, facts: dict):
    """The step's typed facts (steps/base.py Facts) from the fixture's: a misspelt or missing
    field anywhere fails."""
    if step.Facts is NoFacts:   # TRANSITION: removed once every step declares Facts
        return facts
    return typed_facts(step, facts)


RULES = {**{name: registered for name in REGISTRY},
         "preflight": preflight, "preflight-cluster": preflight_cluster, "rank": ranks,
         "memory": memory, "launch": launch_plan, "ray-cluster": launch_plan,
         "compile-cache-seal": launch_plan, "guard": guard_facts,
         "dry-fire-launch": dry_fire_launch_plan, "dry-fire-ray-cluster": dry_fire_launch_plan,
         "dry-fire": launch_plan}
COVERS = {"preflight-cluster": "preflight", "rank": "wait", "memory": "verify"}
# The steps whose plan differs by engine: each has a fixture on a vLLM inventory too.
BY_ENGINE = {"preflight", "ray-cluster", "launch", "wait", "verify", "compile-cache-seal"}


def typed_container(doc: dict | None) -> Container | None:
    """Every field of facts.docker.Container, by name: a misspelt or missing one fails."""
    return None if doc is None else Container(**{**doc, "cmd": tuple(doc["cmd"])})


# fact name -> its typed value from the fixture's JSON
TYPED = {"container": typed_container}


def typed(facts: dict) -> dict:
    return {k: TYPED[k](v) if k in TYPED else v for k, v in facts.items()}


def _cases() -> list[dict]:
    return [json.loads(p.read_text()) for p in CASES]


def test_there_are_fixtures_for_every_rule_and_every_registered_step():
    covered = {case["step"] for case in _cases()}
    assert covered == set(RULES)
    assert {COVERS.get(name, name) for name in covered} == set(REGISTRY)


def test_the_steps_that_differ_by_engine_have_vllm_fixtures():
    def kind(case):
        return inventory.parse(inventory_doc(case)).engine.kind
    with_vllm = {COVERS.get(c["step"], c["step"]) for c in _cases() if kind(c) == "vllm"}
    assert BY_ENGINE <= with_vllm, BY_ENGINE - with_vllm


def test_a_misspelt_or_missing_container_field_in_a_fixture_fails():
    case = json.loads((FIXTURES / "launch-done.json").read_text())
    doc = case["facts"]["container"]
    assert typed(case["facts"])["container"].running is True
    misspelt = {("runing" if k == "running" else k): v for k, v in doc.items()}
    with pytest.raises(TypeError, match="runing"):
        typed({"container": misspelt})
    with pytest.raises(TypeError, match="image_id"):
        typed({"container": {k: v for k, v in doc.items() if k != "image_id"}})


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_fixture(path, tmp_path):
    case = json.loads(path.read_text())
    case["facts"] = typed(case["facts"])
    ctx = node_ctx(case, tmp_path)
    expect = case["expect"]
    if "error" in expect:
        with pytest.raises(StepFailed) as err:
            RULES[case["step"]](case["facts"], ctx, case)
        assert expect["error"] in str(err.value)
        return
    out = RULES[case["step"]](case["facts"], ctx, case)
    if "problems" in expect:
        assert [kind for kind, _ in out] == [kind for kind, _ in expect["problems"]], out
        for (_, message), (_, fragment) in zip(out, expect["problems"]):
            assert fragment in message
    elif "actions" in expect:
        assert [a.shown() for a in out] == expect["actions"]
    else:
        assert [a.description for a in out] == expect["action_descriptions"]

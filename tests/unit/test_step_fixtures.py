"""Every registered step from fixtures, like pyinfra's operation fixtures:
tests/fixtures/steps/*.json, each {"step", "inventory_file" (a reference inventory under
inventories/, optional), "inventory" (overrides, optional), "rank", "params" (the playbook's
`with:`), "options", "facts", "expect", "source" (where a value in the facts comes from)}.

Facts in (built into the step's Facts strictly by tests/unit/typed.py: a misspelt or missing
field fails), actions or problems out; no SSH. `expect` is
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
from k3deploy.facts.nvidia_smi import Gpu
from k3deploy.node.run_inputs import RunInputs
from k3deploy.node.context import NodeContext, RunContext
from k3deploy.steps import REGISTRY, step_class
from k3deploy.steps.engine.launch import LaunchEngine, secret_file
from k3deploy.steps.checks.preflight import Preflight
from k3deploy.steps.engine.verify import memory_problems
from k3deploy.steps.engine.wait import rank_problem
from k3deploy.steps.engine.compile_cache_seal import SealFacts
from tests.unit.fakes import FakeSession
from tests.unit.typed import build, facts as typed_facts
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
    return Preflight().problems(typed_facts(Preflight, facts), ctx)


def preflight_cluster(facts, ctx, case):
    """Every checked node reports the same facts; a node left out of "checked" could not be
    reached. With hub_client null the port check (which needs SSH) is not run."""
    checked = case.get("checked", [n.name for n in ctx.inv.nodes])
    seen = typed_facts(Preflight, facts)
    rows = Preflight().cluster_problems({n: seen for n in checked}, ctx.run)
    return [(f"{node}:{kind}", message) for node, kind, message in rows]


def ranks(facts, ctx, case):
    expected = {node.name: rank for rank, node in ctx.inv.ranked()}
    found = rank_problem(facts["cmds"], expected)
    return [] if found is None else [("ranks", found[0]), ("stray", ", ".join(found[1]))]


def memory(facts, ctx, case):
    """verify's memory rule alone: the fixture gives nvidia-smi's GPUs (facts.nvidia_smi.Gpu)."""
    return memory_problems(build(tuple[Gpu, ...] | None, facts["gpus"]), ctx.inv, ctx.rank)


def launch_facts(step, facts, ctx):
    """The step's typed launch facts with what only the code computes from this inventory: the
    real launch's spec and compile cache key's inputs, always; "<config>" (a container label),
    "<key-file>" (the key file's hash) and "<cache-key>" (a compile-cache dir's key) stand for
    those values, so a done node is one whose container, file or cache match them."""
    seen = typed_facts(step, facts)
    spec, key_inputs = LaunchEngine().spec_and_cache_key(seen, ctx)
    container = seen.container
    if container and container.labels.get(CONFIG_LABEL) == "<config>":
        container = dataclasses.replace(container, labels={CONFIG_LABEL: spec.labels[CONFIG_LABEL]})
    key_sha = seen.key_file_sha
    if key_sha == "<key-file>":
        key_sha = hashlib.sha256(secret_file(spec)[1](KEY).encode()).hexdigest()
    seen = dataclasses.replace(seen, spec=spec, key_inputs=key_inputs, container=container,
                               key_file_sha=key_sha)
    if not isinstance(seen, SealFacts):
        return seen
    key = (spec.compile_cache_host_dir or "").rsplit("/", 1)[-1]
    caches = {key if k == "<cache-key>" else k: v for k, v in seen.compile_caches.items()}
    return dataclasses.replace(seen, compile_caches=caches)


def launch_plan(facts, ctx, case):
    """launch and the steps that share its spec (ray-cluster starts the same containers,
    compile-cache-seal seals the launch's cache, the dry-fire's verdict seals its own)."""
    step = step_class(case["step"])(case.get("params"))
    return step.plan(launch_facts(step, facts, ctx), ctx)


def dry_fire_launch_plan(facts, ctx, case):
    """dry-fire-launch and dry-fire-ray-cluster: the launch's facts for the dummy-weights spec;
    "<dry-config>" stands for that spec's config label (a container's, a passed dry-fire's),
    "<config>" for the real launch's."""
    step = step_class(case["step"])(case.get("params"))
    step._launched = set()
    seen = launch_facts(step, facts, ctx)   # the real spec's values for "<config>", "<key-file>"
    spec, key_inputs = step.spec_and_cache_key(seen, ctx)
    dry = spec.labels[CONFIG_LABEL]
    container = seen.container
    if container and container.labels.get(CONFIG_LABEL) == "<dry-config>":
        container = dataclasses.replace(container, labels={**container.labels, CONFIG_LABEL: dry})
    passed = tuple(dry if c == "<dry-config>" else c for c in seen.dry_fire_passed)
    return step.plan(dataclasses.replace(
        seen, spec=spec, key_inputs=key_inputs, container=container,
        real_config=seen.spec.labels[CONFIG_LABEL], dry_fire_passed=passed), ctx)


def guard_facts(facts, ctx, case):
    """"<digest>" in the guard's state stands for this inventory's guard config digest."""
    step = step_class("guard")(case.get("params"))
    seen = typed_facts(step, facts)
    state = seen.guard_state
    if state and state.digest == "<digest>":
        state = dataclasses.replace(state, digest=step.config(ctx)["digest"])
        seen = dataclasses.replace(seen, guard_state=state)
    return step.plan(seen, ctx)


def registered(facts, ctx, case):
    """A registered step as the runner asks it: its problems (read-only findings), else its plan."""
    step = step_class(case["step"])(case.get("params"))
    facts = typed_facts(step, facts)
    if "problems" in case["expect"]:
        return step.problems(facts, ctx)
    return step.plan(facts, ctx)


RULES = {**{name: registered for name in REGISTRY},
         "preflight": preflight, "preflight-cluster": preflight_cluster, "rank": ranks,
         "memory": memory, "launch": launch_plan, "ray-cluster": launch_plan,
         "compile-cache-seal": launch_plan, "guard": guard_facts,
         "dry-fire-launch": dry_fire_launch_plan, "dry-fire-ray-cluster": dry_fire_launch_plan,
         "dry-fire": launch_plan}
COVERS = {"preflight-cluster": "preflight", "rank": "wait", "memory": "verify"}
# The steps whose plan differs by engine: each has a fixture on a vLLM inventory too.
BY_ENGINE = {"preflight", "ray-cluster", "launch", "wait", "verify", "compile-cache-seal"}


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


def test_a_misspelt_or_missing_field_in_any_fixture_fails():
    """Every fixture is built into its step's Facts strictly, nested records included."""
    case = json.loads((FIXTURES / "launch-done.json").read_text())
    doc = case["facts"]["container"]
    step = LaunchEngine()
    assert typed_facts(step, case["facts"]).container.running is True
    misspelt = {("runing" if k == "running" else k): v for k, v in doc.items()}
    with pytest.raises(TypeError, match="runing"):
        typed_facts(step, {**case["facts"], "container": misspelt})
    with pytest.raises(TypeError, match="image_id"):
        typed_facts(step, {**case["facts"],
                           "container": {k: v for k, v in doc.items() if k != "image_id"}})
    with pytest.raises(TypeError, match="contaner"):
        typed_facts(step, {**case["facts"], "contaner": doc})


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_fixture(path, tmp_path):
    case = json.loads(path.read_text())
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

"""Every rule from a fixture, like pyinfra's operation fixtures: tests/fixtures/steps/*.json,
each {"step", "inventory" (overrides, optional), "rank" (optional), "facts", "expect"}.
Facts in, actions or problems out; no SSH. `expect` is exact: {"actions": [shown lines]},
{"action_descriptions": [...]} (for argvs too long to spell out), or {"problems":
[[kind, a fragment of the message], ...]} in order; an empty list means "nothing to do"."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from k3deploy.cluster import inventory
from k3deploy.cluster.hubmeta import Manifest, RepoFile
from k3deploy.engines import CONFIG_LABEL
from k3deploy.node.run_inputs import RunInputs
from k3deploy.node.context import NodeContext, RunContext
from k3deploy.steps.download import DownloadWeights
from k3deploy.steps.image import PullImage
from k3deploy.steps.launch import LaunchEngine, secret_file
from k3deploy.steps.nvme import MoveToNvme
from k3deploy.steps.preflight import Preflight
from k3deploy.steps.verify import memory_problems
from k3deploy.steps.wait import rank_problem
from tests.unit.fakes import FakeSession
from tests.unit.invdata import four_nodes

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "steps"
CASES = sorted(FIXTURES.glob("*.json"))
KEY = "k3-testkey-0123456789"
GB = 10**9


def manifest(total_bytes: int) -> Manifest:
    return Manifest("moonshotai/Kimi-K3", "main", "a" * 40, None,
                    (RepoFile("model-00001-of-00096.safetensors", total_bytes, "b" * 64, "c" * 40),))


def node_ctx(case: dict, tmp_path) -> NodeContext:
    inv = inventory.parse(four_nodes(**case.get("inventory", {})))
    m = manifest(int(case.get("checkpoint_gb", 1000) * GB))
    inputs = RunInputs(manifest=m, manifest_json=json.dumps(m.to_json(4)), api_key=KEY,
                       token=None, token_read=True)
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


def launch_plan(facts, ctx, case):
    """"<config>" and "<key-file>" stand for this inventory's config label and key file hash,
    which only the code can compute: a done node is one whose container and file match them."""
    step = LaunchEngine()
    spec = step.spec(facts, ctx)
    container = facts.get("container")
    if container and container.get("labels", {}).get(CONFIG_LABEL) == "<config>":
        container = {**container, "labels": {CONFIG_LABEL: spec.labels[CONFIG_LABEL]}}
    key_sha = facts.get("key_file_sha")
    if key_sha == "<key-file>":
        key_sha = hashlib.sha256(secret_file(spec)[1](KEY).encode()).hexdigest()
    return step.plan({**facts, "spec": spec, "container": container, "key_file_sha": key_sha}, ctx)


RULES = {"preflight": preflight, "preflight-cluster": preflight_cluster, "rank": ranks,
         "memory": memory, "launch": launch_plan,
         "nvme": lambda facts, ctx, case: MoveToNvme().plan(facts, ctx),
         "download": lambda facts, ctx, case: DownloadWeights().plan(facts, ctx),
         "image": lambda facts, ctx, case: PullImage().plan(facts, ctx)}


def test_there_are_fixtures_for_every_rule():
    covered = {json.loads(p.read_text())["step"] for p in CASES}
    assert covered == set(RULES)


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_fixture(path, tmp_path):
    case = json.loads(path.read_text())
    ctx = node_ctx(case, tmp_path)
    out = RULES[case["step"]](case["facts"], ctx, case)
    expect = case["expect"]
    if "problems" in expect:
        assert [kind for kind, _ in out] == [kind for kind, _ in expect["problems"]], out
        for (_, message), (_, fragment) in zip(out, expect["problems"]):
            assert fragment in message
    elif "actions" in expect:
        assert [a.shown() for a in out] == expect["actions"]
    else:
        assert [a.description for a in out] == expect["action_descriptions"]

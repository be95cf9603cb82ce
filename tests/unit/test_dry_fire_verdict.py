"""The dry-fire's verdict (steps/dry_fire/dry_fire_verdict.py): typed facts in, the report each node keeps,
the chat completion the head sends, what `up` prints; dry-fire-stop."""

from __future__ import annotations

import dataclasses
import json

import pytest
from realfix import real

from k3deploy import engines
from k3deploy.core.errors import StepFailed
from k3deploy.engines.dry_fire import DRY_FIRE_LABEL
from k3deploy.facts import UnknownFact, http
from k3deploy.facts.nccl import NcclTransport
from k3deploy.facts.nvidia_smi import Gpu
from k3deploy.steps.dry_fire.dry_fire_verdict import DryFireStop, DryFireVerdict, Report
from tests.unit import typed
from tests.unit.docker_facts import container
from tests.unit.looked import looked
from tests.unit.test_step_plans import manifest, node_ctx

H100 = "NVIDIA H100 80GB HBM3"
DRY = {engines.CONFIG_LABEL: "abc", DRY_FIRE_LABEL: "1"}


def ctx_for(tmp_path, rank=0):
    return node_ctx(tmp_path, rank=rank, manifest=manifest(), api_key="k3-testkey-0123456789")


def verdict_facts(ctx, **values):
    step = DryFireVerdict()
    step.prepare(ctx.run)
    return step, looked(step, ctx, cuda="13.0", container=container(labels=DRY), **values)


def test_each_node_keeps_what_its_engine_reached(tmp_path):
    ctx = ctx_for(tmp_path, rank=1)
    gpus = (Gpu(H100, 81559, 70963), Gpu(H100, 81559, 71002))
    nccl = NcclTransport("IB", ("mlx5_0:1/IB",), True)
    step, facts = verdict_facts(ctx, gpus=gpus, nccl=nccl)
    assert facts.gpus == gpus and facts.dry_fire_passed == ()
    actions = step.plan(facts, ctx)
    keep = actions[-1]
    assert keep.upload_to.endswith("/dry-fire/abc.json")
    kept = json.loads(keep.content)
    assert kept["gpu_used_mib"] == [70963, 71002] and kept["nccl_transport"] == "IB"
    assert kept["nccl_devices"] == ["mlx5_0:1/IB"] and kept["config"] == "abc"
    step._reports[ctx.name] = keep.note   # what apply keeps of the upload
    assert step.detail(facts, ctx) == kept
    assert "GPU memory up to 69.3 GiB on 2 GPUs; NCCL over IB" in step.closing_lines(
        ctx.run, {ctx.name: facts})[1]
    passed = looked(step, ctx, cuda="13.0", container=container(labels=DRY),
                    dry_fire_passed=("abc",))
    assert step.plan(passed, ctx) == []


def test_the_head_asks_one_chat_completion_and_a_refusal_fails_the_dry_fire(tmp_path):
    ctx = ctx_for(tmp_path)
    step, facts = verdict_facts(ctx)
    assert step.plan(facts, ctx)[0].tag == "request"
    refused = http.Endpoint(chat=http.answer({"status": 500, "body": "CUDA error"}))
    ctx.run.executor.gather = lambda _step, _node, _facts: {"answer": refused}
    with pytest.raises(StepFailed, match="a chat completion answered 500: CUDA error"):
        step._request(ctx, None)
    ok = http.Endpoint(chat=http.answer({"status": 200, "body": {"choices": []}}))
    ctx.run.executor.gather = lambda _step, _node, _facts: {"answer": ok}
    step._request(ctx, None)
    assert ctx.name in step._answers


def _asked(answer: http.Endpoint, log: str, seen: list):
    """The executor's gather: the probe's answer, then the head's engine log."""
    def gather(_step, _node, facts):
        seen.append(facts[0])
        return {"answer": answer} if facts[0].name == "answer" else {facts[0].name: log}
    return gather


def test_a_multi_node_sglang_dry_fire_sends_39568s_load_and_names_the_hang(tmp_path):
    ctx = ctx_for(tmp_path)
    step, facts = verdict_facts(ctx)
    spec = dataclasses.replace(facts.spec, extra_args={"watchdog-timeout": None,
                                                       "disable-flashinfer-autotune": None})
    asked = step.plan(facts, ctx)[0]
    assert "a batch of 32 long requests" in asked.description and asked.note == facts.spec
    ended = http.answer({"status": None, "error": "Remote end closed connection without response"})
    answer = http.Endpoint(chat=ended, decode_batch=ended)
    log = (real("sglang/0.5.16/watchdog-debug-info.txt")
           + real("sglang/main-2026-05/watchdog-timeout.txt"))
    seen: list = []
    ctx.run.executor.gather = _asked(answer, log, seen)
    with pytest.raises(StepFailed) as err:
        step._request(ctx, spec)
    text = f"{err.value} {err.value.hint}"
    assert "the first multi-node decode outlived SGLang's scheduler watchdog" in text, text
    assert "TP5's scheduler made no forward progress for 300 s with a batch of 1" in text, text
    assert "sgl-project/sglang#39568" in text and "--watchdog-timeout 3600" in text, text
    assert "turns off or changes watchdog-timeout, disable-flashinfer-autotune" in text, text
    probe = json.loads(seen[0].stdin)
    # the default watchdog (300 s) polled every half: it fires by 450 s, then 5 s, margin 60
    assert probe["checks"] == ["chat", "decode_batch"] and probe["decode_timeout"] == 515.0


def test_a_failed_load_without_watchdog_lines_says_what_it_got(tmp_path):
    ctx = ctx_for(tmp_path)
    step, facts = verdict_facts(ctx)
    ok = http.answer({"status": 200, "body": {"choices": []}})
    answer = http.Endpoint(chat=ok, decode_batch=http.answer({"status": 500, "body": "oom"}))
    ctx.run.executor.gather = _asked(answer, "Load weight end.\n", [])
    with pytest.raises(StepFailed, match="a batch of 32 long requests answered 500: oom"):
        step._request(ctx, facts.spec)


def test_a_report_is_json_with_the_keys_it_always_had():
    report = Report("abc", (1, 2), {"load": 3.0}, None, (), 10.0)
    assert json.loads(json.dumps(report.doc())) == {
        "config": "abc", "gpu_used_mib": [1, 2], "phases_s": {"load": 3.0},
        "nccl_transport": None, "nccl_devices": [], "at": 10.0}


def test_dry_fire_stop_removes_only_a_dry_fire_and_refuses_a_misspelt_fact(tmp_path):
    ctx = ctx_for(tmp_path)
    step = DryFireStop()
    running = typed.facts(step, {"container": None})
    assert step.plan(running, ctx) == []
    dry = looked(step, ctx, container=container(labels=DRY))
    assert [a.description for a in step.plan(dry, ctx)] == ["stop the dry-fire's engine"]
    with pytest.raises(UnknownFact, match="containr"):
        typed.facts(step, {"containr": None})
    with pytest.raises(UnknownFact, match="dry_fire_pased"):
        typed.facts(DryFireVerdict, {"dry_fire_pased": []})

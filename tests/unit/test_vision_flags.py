"""The vision path: which flags turn it off (engines/vision.py, read through the engines' option
tables), verify's judgement of its image probe and the certificate's record of it (that no
reference inventory's launch turns it off: test_inventories.py)."""

from __future__ import annotations

import json
import pytest

from k3deploy.cluster import inventory
from k3deploy.engines import vision
from k3deploy.facts import http
from k3deploy.facts.nvidia_smi import Gpu
from k3deploy.serving import certificate
from k3deploy.steps.engine import certify
from k3deploy.steps.engine.verify import VerifyEndpoint, VerifyFacts, vision_problems
from tests.realfix import real

ANSWER = http.answer({"status": 200, "body": {"choices": [{"message": {
    "role": "assistant", "content": "It is red.", "reasoning_content": "A red square."}}]}})


def flags(engine: str, argv: list[str]) -> list[str]:
    return [v.as_given for v in vision.vision_off(engine, argv)]


@pytest.mark.parametrize("engine, argv, off", [
    ("vllm", ["moonshotai/Kimi-K3", "--language-model-only"], ["--language-model-only"]),
    ("vllm", ["--language-model-only", "--no-language-model-only"], []),
    ("vllm", ["--limit-mm-per-prompt", '{"image": 0}'], ['--limit-mm-per-prompt {"image": 0}']),
    ("vllm", ['--limit-mm-per-prompt={"image": {"count": 0}}'],
     ['--limit-mm-per-prompt={"image": {"count": 0}}']),
    ("vllm", ["--limit-mm-per-prompt", '{"image": 2, "video": 0}'], []),
    ("vllm", ["--limit-mm-per-prompt", '{"image": 0}', "--limit-mm-per-prompt", '{"image": 4}'],
     []),
    ("vllm", ["--mm-encoder-tp-mode", "data"], []),   # the guide's MoonViT flag keeps it on
    ("sglang", ["--model-path", "m", "--language-model-only"], ["--language-model-only"]),
    ("sglang", ["--enable-multimodal"], []),
])
def test_which_flags_turn_vision_off(engine, argv, off):
    assert flags(engine, argv) == off


def test_every_switch_is_an_option_of_the_engines_table(monkeypatch):
    for engine in ("vllm", "sglang"):
        assert vision._options(engine)   # raises if the table lost one
    monkeypatch.setitem(vision.OFF_SWITCHES, "sglang", ("--disable-vision-for-real",))
    with pytest.raises(ValueError, match="no option --disable-vision-for-real"):
        vision.vision_off("sglang", [])


def _inv(kind: str, args: dict):
    return inventory.parse({"cluster": "b300", "engine": {"kind": kind, "args": args},
                            "gpu": {"model": "b300", "count": 8},
                            "nodes": [{"name": "node0", "address": "10.0.0.10"}]})


def test_vllm_launch_without_vision_fails_naming_the_flag():
    inv = _inv("vllm", {"limit-mm-per-prompt": '{"image": 0}'})
    refused = http.answer(json.loads(real("vllm/main-0045689b/image-limit-zero-chat.txt")))
    (check, message), = vision_problems(refused, inv)
    assert check == "vision"
    assert '--limit-mm-per-prompt {"image": 0}' in message
    assert "engine.args.limit-mm-per-prompt" in message and "400" in message
    assert "At most 0 image(s)" in message


def test_sglang_launch_without_vision_fails_though_it_answers():
    # SGLang drops the image and answers from the text: the flag is what fails it.
    (check, message), = vision_problems(ANSWER, _inv("sglang", {"language-model-only": True}))
    assert check == "vision" and "--language-model-only" in message
    assert "engine.args.language-model-only" in message


def test_an_unanswered_image_probe_fails_without_a_flag():
    (check, message), = vision_problems(http.answer({"status": 500, "body": "boom"}),
                                        _inv("vllm", {}))
    assert check == "vision" and "image_url" in message and "500" in message
    (_, message), = vision_problems(None, _inv("vllm", {}))
    assert "None" in message


class _Head:
    is_head, rank, name = True, 0, "node0"

    def __init__(self, inv):
        self.inv = inv


def test_verify_problems_include_the_vision_check():
    inv = _inv("vllm", {"language-model-only": True})
    refused = http.answer({"status": 400, "body": {"error": {"message": "no"}}})
    facts = VerifyFacts(None, {}, (Gpu("NVIDIA B300", 200000, 200000),), None,
                        http.Endpoint(vision=refused))
    found = dict(VerifyEndpoint().problems(facts, _Head(inv)))
    assert "--language-model-only" in found["vision"]


def test_the_certificate_records_the_vision_check():
    refused = http.answer(json.loads(real("vllm/main-0045689b/image-limit-zero-chat.txt")))
    version = http.answer({"status": 200, "body": {"version": "0.19.1", "path": "/version"}})
    head = certify.node_record(certify.CertifyFacts(None, {}, None, None, http.Endpoint(
        vision=refused, version=version)))
    assert head["engine_version"] == {"version": "0.19.1", "path": "/version"}
    assert head["vision"] == {"status": 400, "answered": False,
                              "error": "At most 0 image(s) may be provided in one prompt."}
    ok = certify.node_record(certify.CertifyFacts(None, {}, None, None, http.Endpoint(
        vision=ANSWER)))["vision"]
    assert ok == {"status": 200, "answered": True, "error": None}
    doc = certificate.build("up", "c", {"head": head}, verify={}, now=0)
    assert doc["vision"]["status"] == 400
    assert certificate.build("bench", "c", {"head": {}}, verify={}, now=0)["vision"] is None

"""An image whose engine predates the model is told by the engine's own refusal of the model's
parser (argparse's `invalid choice`), not by its tag: real refusals in, the rejected value and
the engine's own list out; the model's parser refused -> a hint that names the image."""

from __future__ import annotations

import pytest

from k3deploy.cluster import inventory
from k3deploy.core.errors import EngineImageError
from k3deploy.engines import parsers
from k3deploy.engines.parsers import RejectedChoice
from k3deploy.steps.engine import raylayout
from tests.realfix import real

B200 = inventory.parse({"cluster": "b200", "engine": {"kind": "vllm"},
                        "gpu": {"model": "b200", "count": 8},
                        "nodes": [{"name": f"node{i}", "address": f"10.0.0.{10 + i}"}
                                  for i in range(2)]})
SGLANG = real("sglang/main-2025-08/tool-call-parser-invalid-choice.txt")
VLLM = real("vllm/0.6.2/tool-call-parser-invalid-choice.txt")


def test_sglangs_refusal_names_the_flag_the_value_and_every_parser_it_knows():
    assert parsers.rejected_choice(SGLANG) == RejectedChoice(
        "tool-call-parser", "gpt-os",
        ("llama3", "qwen25", "mistral", "deepseekv3", "pythonic", "kimi_k2", "qwen3_coder",
         "glm45", "step3", "gpt-oss"))


def test_vllms_refusal_reads_the_same():
    assert parsers.rejected_choice(VLLM) == RejectedChoice("tool-call-parser", "llama3_json",
                                                           ("mistral", "hermes"))


def test_a_value_the_inventory_got_wrong_is_no_image_problem():
    # 'gpt-os' and 'llama3_json' are typos of the user's, not the model's parser
    assert parsers.unknown_model_parser(SGLANG, "lmsysorg/sglang:v0.5.0") is None
    assert parsers.unknown_model_parser("ValueError: boom", None) is None


def test_the_models_parser_refused_names_the_image_and_what_its_engine_knows():
    # The same refusal as an image from before Kimi K3 prints it for the model's parser (the
    # testbed's engine_fault=parser), in both of argparse's renderings of the choices: repr
    # (CPython < 3.12.4) and str (gh-117766).
    quoted = SGLANG.replace("'gpt-os'", "'kimi_k3'").replace("--tool-call-parser",
                                                             "--reasoning-parser")
    bare = ("sglang serve: error: argument --tool-call-parser: invalid choice: 'kimi_k3' "
            "(choose from llama3, qwen25, kimi_k2, gpt-oss)")
    pinned = parsers.unknown_model_parser("Init...\n" + quoted, "lmsysorg/sglang:v0.5.16")
    assert pinned.startswith("the engine in lmsysorg/sglang:v0.5.16 predates Kimi K3: its "
                             "--reasoning-parser knows kimi_k2, llama3, qwen25, mistral, "
                             "deepseekv3, pythonic and 4 more, not kimi_k3; leave engine.image "
                             "unset"), pinned
    stale = parsers.unknown_model_parser(bare, "lmsysorg/sglang:kimi-k3")
    assert "--tool-call-parser knows kimi_k2, llama3, qwen25, gpt-oss, not kimi_k3" in stale
    assert "`docker rmi lmsysorg/sglang:kimi-k3` on it" in stale, stale


def test_a_ray_serve_that_refused_the_models_parser_is_the_images_fault():
    # vLLM over Ray: the head's serve log (probes.engine_log) holds vLLM's own refusal
    log = VLLM.replace("'llama3_json'", "'kimi_k3'")
    with pytest.raises(EngineImageError) as failed:
        raylayout.serve_alive(None, False, B200, log, "vllm/vllm-openai:nightly")
    assert failed.value.node == "node0" and "invalid choice: 'kimi_k3'" in str(failed.value)
    assert "`docker rmi vllm/vllm-openai:nightly` on it" in failed.value.hint

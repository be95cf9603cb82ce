"""The stand-in engines' vision path on loopback: an image (verify's own probe body) is answered
with the path on; with it off vLLM refuses the image as upstream does and SGLang answers from the
text alone (sources: scripts/tb/standins/engine/README.md, "Vision"). No root needed."""
import pytest
from standin_procs import (VLLM_IMAGE, free_port, http, make_node, sglang_cmd, vllm_cmd,
                           wait_health)

from k3deploy.remote import endpoint_probe

IMAGE = {"type": "image_url",
         "image_url": {"url": "data:image/png;base64," + endpoint_probe.PNG_B64}}
BODY = {"model": "moonshotai/Kimi-K3", "max_tokens": 256, "reasoning_effort": "low",
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "What colour is this image?"}, IMAGE]}]}


def serve(cluster, tmp_path, flavor, *extra):
    run = make_node(tmp_path, "node0")
    port = free_port()
    argv = vllm_cmd(port, 8, *extra) if flavor == "vllm" else sglang_cmd(port, *extra)
    proc = cluster.start(run, argv, **({"image": VLLM_IMAGE} if flavor == "vllm" else {}))
    wait_health(port, proc)
    return port


@pytest.mark.parametrize("flavor", ["vllm", "sglang"])
def test_an_image_is_answered_with_the_vision_path_on(cluster, tmp_path, flavor):
    status, reply = http(serve(cluster, tmp_path, flavor), "/v1/chat/completions", BODY)
    assert status == 200
    assert "[stand-in: saw 1 image(s)]" in reply["choices"][0]["message"]["content"]


@pytest.mark.parametrize("extra", [["--language-model-only"],
                                   ["--limit-mm-per-prompt", '{"image": 0}']])
def test_vllm_without_vision_refuses_the_image(cluster, tmp_path, extra):
    status, reply = http(serve(cluster, tmp_path, "vllm", *extra), "/v1/chat/completions", BODY)
    assert status == 400
    assert reply["error"]["message"] == "At most 0 image(s) may be provided in one prompt."
    assert reply["error"]["type"] == "BadRequestError"


def test_vllm_with_images_allowed_answers(cluster, tmp_path):
    port = serve(cluster, tmp_path, "vllm", "--limit-mm-per-prompt", '{"image": 2}')
    assert http(port, "/v1/chat/completions", BODY)[0] == 200


def test_sglang_without_vision_answers_from_the_text_alone(cluster, tmp_path):
    port = serve(cluster, tmp_path, "sglang", "--language-model-only")
    status, reply = http(port, "/v1/chat/completions", BODY)
    assert status == 200 and "saw 1 image" not in reply["choices"][0]["message"]["content"]

"""The vision path of the stand-in engines: whether the launch left it on, and what the real
engine answers to an image when it did not (sources in README.md, "Vision").

vLLM: `--language-model-only` sets every modality's limit to 0 (vLLM's multimodal-models
docs: "setting all multimodal modalities to 0 using --language-model-only"), as does `--limit-mm-per-prompt '{"image": 0}'`; the
chat parser's item tracker then refuses the first image in validate_num_items
(vllm/entrypoints/chat_utils.py@001eadcf, vllm/multimodal/processing/context.py@0045689b) with
a ValueError, which the OpenAI server returns as 400 BadRequestError.
SGLang: `--language-model-only` loads no vision tower; the tokenizer manager processes images
only `if self.mm_processor and obj.contains_mm_input()` and otherwise tokenizes the text alone
(python/sglang/srt/managers/tokenizer_manager.py@c60799d0, _tokenize_one_request): the request
is answered, 200, without the image.
"""
import json

import chat


def _image_limit_zero(text):
    try:
        limits = json.loads(text) if isinstance(text, str) else (text or {})
    except ValueError:
        return False
    image = limits.get("image") if isinstance(limits, dict) else None
    return (image.get("count") if isinstance(image, dict) else image) == 0


def off_flag(flavor, args):
    """The flag that turned the vision path off in this launch, or None."""
    if getattr(args, "language_model_only", False):
        return "--language-model-only"
    if flavor == "vllm" and _image_limit_zero(getattr(args, "limit_mm_per_prompt", None)):
        return "--limit-mm-per-prompt"
    return None


def check(flavor, vision_off, messages):
    """vLLM refuses an image it may not take; SGLang takes the request and drops the image."""
    if not vision_off or flavor != "vllm" or not isinstance(messages, list):
        return
    if chat.image_parts(messages):
        # supported_mm_limits for the image modality is None (no model cap), so vLLM adds no
        # "Set `--limit-mm-per-prompt` to increase this limit." (context.py, num_items <=
        # supported_limit is false with supported_limit = allowed_limit = 0).
        raise chat.BadRequest("At most 0 image(s) may be provided in one prompt.",
                              param="image")

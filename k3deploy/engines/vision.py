"""Which launch flags turn an engine's vision path off: the one home for that decision (verify
names the flag it finds; the tests check the reference launches against it).

The flags are looked up in the engines' own option tables (cli_tables/*.json, SGLang 0.5.23 and
vLLM 0.33.0), so a spelling the parser accepts (`--opt=value`, `--no-opt`) is read as it would
read it, and a table refresh that drops one of these options fails here, not silently.

- vLLM `--language-model-only` (EnableDisableAction; `--no-language-model-only` undoes it):
  "a text-only mode can be enabled by setting all multimodal modalities to 0 using
  --language-model-only" (vLLM's multimodal-models docs, mirrored at
  https://www.mintlify.com/vllm-project/vllm/models/multimodal-models); the stored upstream
  copies of vllm/config/multimodal.py predate the option, which is in the 0.33.0 table.
- vLLM `--limit-mm-per-prompt` with an image count of 0 (`{"image": 0}` or
  `{"image": {"count": 0}}`, MultiModalConfig._validate_limit_per_prompt): every image is
  refused by validate_num_items (vllm/multimodal/processing/context.py@0045689b).
- SGLang `--language-model-only` (store_true): loads the language model without its vision
  tower (its model files refuse visual features "loaded with --language-model-only").
  SGLang's `--enable-multimodal` only turns the path on (ModelConfig: None means on for K3's
  architecture), so it has no "off" spelling to look for.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

from k3deploy.engines.cli_contract import Option, load_table

OFF_SWITCHES = {"vllm": ("--language-model-only",), "sglang": ("--language-model-only",)}
IMAGE_LIMITS = {"vllm": "--limit-mm-per-prompt"}


@dataclass(frozen=True)
class VisionOff:
    flag: str        # the option's canonical spelling, e.g. --language-model-only
    as_given: str    # what the argv says, e.g. --limit-mm-per-prompt {"image": 0}


def _options(engine: str) -> dict[str, Option]:
    table = load_table(engine)
    wanted = [*OFF_SWITCHES.get(engine, ()), *filter(None, [IMAGE_LIMITS.get(engine)])]
    missing = [w for w in wanted if w not in table.by_string]
    if missing:
        raise ValueError(f"{table.label} has no option {', '.join(missing)}")
    return {s: table.by_string[w] for w in wanted for s in table.by_string[w]["option_strings"]}


def _words(argv: list[str]) -> Iterator[tuple[str, str | None, str]]:
    """(option, value or None, text as given) for each option word of argv."""
    i = 0
    while i < len(argv):
        name, eq, inline = argv[i].partition("=")
        if eq:
            yield name, inline, argv[i]
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            yield name, argv[i + 1], f"{name} {argv[i + 1]}"
        else:
            yield name, None, name
        i += 1


def image_limit_zero(value: str | None) -> bool:
    try:
        limits = json.loads(value or "")
    except ValueError:
        return False
    image = limits.get("image") if isinstance(limits, dict) else None
    count = image.get("count") if isinstance(image, dict) else image
    return count == 0


def vision_off(engine: str, argv: list[str]) -> list[VisionOff]:
    """The flags of `argv` (an engine's serve arguments) that leave the vision path off;
    the last spelling of a switch wins, as in argparse."""
    options = _options(engine)
    state: dict[str, VisionOff | None] = {}
    for name, value, given in _words(argv):
        spec = options.get(name)
        if spec is None:
            continue
        canonical = spec["option_strings"][0]
        if spec["nargs"] == 0:
            negative = name in spec.get("negative_option_strings", [])
            state[canonical] = None if negative else VisionOff(canonical, name)
        else:
            state[canonical] = VisionOff(canonical, given) if image_limit_zero(value) else None
    return [v for v in state.values() if v is not None]

"""The model's output parsers, and what an engine that does not know them says. Pure.

Kimi K3's reasoning and tool-call parsers are named `kimi_k3` in both engines. An image whose
engine predates the model rejects that name at its argument check, before anything starts:
SGLang and vLLM both declare the flags with argparse `choices` (SGLang server_args.py
add_cli_args: `choices=list(FunctionCallParser.ToolCallParserEnum.keys())`, sgl-project/sglang
#9316; vLLM's cli_args.py before its parser plugins), so the engine exits with argparse's own
line (CPython Lib/argparse.py `_check_value`): `PROG: error: argument --tool-call-parser:
invalid choice: 'V' (choose from 'a', 'b')`. Since CPython 3.12.4 (gh-117766) the choices are
printed with str(), without quotes. That list is the image's own account of what it can parse:
the image is judged by it, not by its tag (the kimi-k3 tag builds SGLang from main on top of
v0.5.16, whose stock release has no kimi_k3 parser).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from k3deploy.engines.images import DEFAULT_IMAGES

MODEL_PARSER = "kimi_k3"
PARSER_FLAGS = ("reasoning-parser", "tool-call-parser")

# argparse names an option by all its option strings joined with "/" ("--tp/--tp-size")
_INVALID_CHOICE = re.compile(r"error: argument (--[\w-]+)(?:/-{1,2}[\w-]+)*: invalid choice: "
                             r"'([^']*)' \(choose from ([^)]*)\)")


@dataclass(frozen=True)
class RejectedChoice:
    flag: str                    # without its dashes: "tool-call-parser"
    value: str
    choices: tuple[str, ...]


def rejected_choice(log: str) -> RejectedChoice | None:
    """The last value argparse rejected as not one of an option's choices, or None."""
    found = None
    for match in _INVALID_CHOICE.finditer(log):
        choices = tuple(c.strip().strip("'\"") for c in match.group(3).split(","))
        found = RejectedChoice(match.group(1).lstrip("-"), match.group(2),
                               tuple(c for c in choices if c))
    return found


def unknown_model_parser(log: str, image: str | None) -> str | None:
    """When the engine refused the model's parser: why, and what to run instead. None for any
    other failure (a parser the inventory set by mistake is the inventory's to fix)."""
    rejected = rejected_choice(log)
    if rejected is None or rejected.flag not in PARSER_FLAGS or rejected.value != MODEL_PARSER:
        return None
    named = image or "the image"
    said = (f"the engine in {named} predates Kimi K3: its --{rejected.flag} knows "
            f"{_known(rejected.choices)}, not {MODEL_PARSER}")
    if image in DEFAULT_IMAGES:   # a tag that moved on: this node's copy is older than it
        return (f"{said}; this node's copy of {image} is older than the model's: "
                f"`docker rmi {image}` on it so that `k3deploy up` pulls the tag again, or pin "
                f"(engine.image) a digest whose engine lists {MODEL_PARSER}")
    return (f"{said}; leave engine.image unset (the model's own image) or pin one whose engine "
            f"lists {MODEL_PARSER}, then re-run `k3deploy up`")


def _known(choices: tuple[str, ...], shown: int = 6) -> str:
    """The model family's own parsers first ("kimi", "kimi_k2"), a few, and how many more."""
    family = MODEL_PARSER.split("_")[0]
    ordered = sorted(choices, key=lambda c: not c.startswith(family))
    more = len(ordered) - shown
    return ", ".join(ordered[:shown]) + (f" and {more} more" if more > 0 else "") \
        if ordered else "no parser"

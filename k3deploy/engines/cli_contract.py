"""The engines' own command-line contract: option tables taken from the real parsers of
`sglang serve`, `vllm serve` and `ray start` (cli_tables/*.json, written by
`scripts/engine-contract refresh`), and a check of an argv against them.

The check follows the parsers' rules (argparse for SGLang and vLLM, click for Ray): an
unknown option, a missing or extra value, a value outside the choices or not of the
option's int/float type is an error; a deprecated option or an option that parses only as
an abbreviation of a longer one (argparse's prefix matching) is a warning.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from collections.abc import Mapping
from typing import NotRequired, TypedDict, cast

from k3deploy.core.jsonvalue import JSON

TABLE_DIR = Path(__file__).with_name("cli_tables")
ENGINES = ("sglang", "vllm", "ray")
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
_NUMBER_TYPES = {"int": int, "float": float}


@dataclass(frozen=True)
class Finding:
    level: str     # "error" or "warning"
    option: str    # the argv token (or config key) it is about
    message: str
    suggestion: str | None = None   # did-you-mean, for an unknown option


class Deprecated(TypedDict):
    message: str
    fatal: bool


class Option(TypedDict):
    """One option (or positional) of a table, the keys read here."""
    option_strings: list[str]
    nargs: int | str | None                 # argparse's nargs; None: one value
    takes_value: bool
    choices: list[JSON] | None
    type: str | None                        # "int", "float", "str", ...
    deprecated: Deprecated | None
    negative_option_strings: list[str]      # --no-X of an EnableDisableAction


class Parser(TypedDict):
    kind: str                               # "argparse" or "click"
    allow_abbrev: bool
    underscores_as_dashes: NotRequired[bool]
    dotted_json_keys: NotRequired[bool]


class ConfigMerger(TypedDict, total=False):
    """SGLang's ConfigArgumentMerger: how a --config YAML key becomes a flag."""
    store_true_keys: list[str]
    unsupported_keys: list[str]


class TableDoc(TypedDict):
    """cli_tables/<engine>.json as scripts/engine-contract writes it (the keys read here)."""
    command: str
    version: str
    options: list[Option]
    positionals: list[Option]
    parser: Parser
    config_merger: NotRequired[ConfigMerger]


@dataclass(frozen=True, eq=False)
class CliTable:
    engine: str
    command: str
    version: str
    options: tuple[Option, ...]
    positionals: tuple[Option, ...]
    parser: Parser
    config_merger: ConfigMerger | None
    by_string: dict[str, Option]      # every accepted spelling -> its option

    @property
    def label(self) -> str:
        return f"{self.command} {self.version}"


@cache
def load_table(engine: str) -> CliTable:
    if engine not in ENGINES:
        raise ValueError(f"no CLI table for {engine!r}; known: {ENGINES}")
    # the tables are this package's own files, written by scripts/engine-contract in
    # TableDoc's shape (tests/unit/test_engine_contract.py reads every one); json.loads cannot say so
    doc = cast(TableDoc, json.loads((TABLE_DIR / f"{engine}.json").read_text(encoding="utf-8")))
    return CliTable(engine=engine, command=doc["command"], version=doc["version"],
                    options=tuple(doc["options"]), positionals=tuple(doc["positionals"]),
                    parser=doc["parser"], config_merger=doc.get("config_merger"),
                    by_string={s: o for o in doc["options"] for s in o["option_strings"]})


def did_you_mean(table: CliTable, name: str) -> str | None:
    """The closest long option to a misspelt one, e.g. '--tp-szie' -> '--tp-size'."""
    longs = [s for s in table.by_string if s.startswith("--")]
    close = difflib.get_close_matches(name, longs, n=1, cutoff=0.6)
    return close[0] if close else None


def resolve(table: CliTable, name: str) -> tuple[Option | None, str | None, list[str]]:
    """(option, the full string it matched, ambiguous candidates) for an option token's name,
    with the parser's own rules: exact match, else argparse's unique-prefix match."""
    if table.parser.get("underscores_as_dashes") and name.startswith("--"):
        head, dot, tail = name.partition(".")
        name = head.replace("_", "-") + dot + tail
    if table.parser.get("dotted_json_keys") and name.startswith("--") and "." in name:
        name = name.split(".", 1)[0]
    if name in table.by_string:
        return table.by_string[name], name, []
    if not table.parser.get("allow_abbrev") or not name.startswith("--"):
        return None, None, []
    matches = [s for s in table.by_string if s.startswith(name)]
    if len(matches) == 1:
        return table.by_string[matches[0]], matches[0], []
    return None, None, matches


def _looks_like_option(table: CliTable, token: str) -> bool:
    if token in table.by_string:
        return True
    if not token.startswith("-") or token == "-":
        return False
    # argparse reads "-1" (no option looks like a number) and "-a b" (a space) as values.
    return not _NEGATIVE_NUMBER.match(token) and " " not in token.partition("=")[0]


def _value_errors(table: CliTable, opt: Option, token: str, value: str) -> list[Finding]:
    choices = opt.get("choices")
    if choices and value not in choices:
        shown = ", ".join(repr(c) for c in choices)
        return [Finding("error", token, f"{table.label}: argument {token}: invalid choice: "
                        f"{value!r} (choose from {shown})")]
    kind = _NUMBER_TYPES.get(opt.get("type") or "")
    if kind is not None:
        try:
            kind(value)
        except ValueError:
            return [Finding("error", token, f"{table.label}: argument {token}: invalid "
                            f"{opt['type']} value: {value!r}")]
    return []


def _option_notes(table: CliTable, token: str, name: str, matched: str, opt: Option) -> list[Finding]:
    notes = []
    if matched != name and name.split(".", 1)[0].replace("_", "-") != matched:
        notes.append(Finding("warning", token, f"{table.label}: {name} is not an option; the "
                             f"parser takes it as an abbreviation of {matched}, which breaks as "
                             f"soon as another option starts with {name}: write {matched}"))
    dep = opt.get("deprecated")
    if dep:
        level = "error" if dep.get("fatal") else "warning"
        notes.append(Finding(level, token, f"{table.label}: {name}: {dep['message']}"))
    return notes


def _unknown(table: CliTable, token: str, name: str, ambiguous: list[str]) -> Finding:
    if ambiguous:
        return Finding("error", token, f"{table.label}: ambiguous option: {name} could match "
                       f"{', '.join(ambiguous)}")
    hint = did_you_mean(table, name)
    tail = f"; did you mean {hint}?" if hint else ""
    what = "No such option" if table.parser["kind"] == "click" else "unrecognized arguments"
    return Finding("error", token, f"{table.label}: {what}: {name}{tail}", suggestion=hint)


def _values_wanted(opt: Option) -> tuple[int, int | None]:
    """(at least, at most) values an option consumes, from argparse's nargs."""
    nargs = opt.get("nargs")
    if nargs is None:
        return 1, 1
    if isinstance(nargs, int):
        return nargs, nargs
    return {"?": (0, 1), "*": (0, None), "+": (1, None)}.get(nargs, (0, None))


def _take_values(table: CliTable, argv: list[str], i: int, most: int | None) -> list[str]:
    if table.parser["kind"] == "click" and most is not None:
        return argv[i:i + most]       # click takes the next token whatever it looks like
    values: list[str] = []
    while i < len(argv) and (most is None or len(values) < most):
        if argv[i] == "--" or _looks_like_option(table, argv[i]):
            break
        values.append(argv[i])
        i += 1
    return values


def _check_option(table: CliTable, argv: list[str], i: int) -> tuple[list[Finding], int]:
    """Findings for the option at argv[i], and the index after its values."""
    token = argv[i]
    name, eq, inline = token.partition("=")
    opt, matched, ambiguous = resolve(table, name)
    if opt is None or matched is None:   # resolve gives both or neither
        # Its would-be values are not reported again as stray arguments.
        skipped = [] if eq else _take_values(table, argv, i + 1, None)
        return [_unknown(table, token, name, ambiguous)], i + 1 + len(skipped)
    found = _option_notes(table, token, name, matched, opt)
    least, most = _values_wanted(opt)
    if eq:
        if most == 0:
            found.append(Finding("error", token, f"{table.label}: argument {name}: ignored "
                                 f"explicit argument {inline!r}"))
        values, nxt = [inline], i + 1
    else:
        values = _take_values(table, argv, i + 1, most)
        nxt = i + 1 + len(values)
    if len(values) < least:
        want = {1: "one argument"}.get(least, f"{least} arguments")
        if most is None:
            want = f"at least {want}"
        found.append(Finding("error", token, f"{table.label}: argument {name}: expected {want}"))
    for value in values:
        found += _value_errors(table, opt, name, value)
    return found, nxt


def check_argv(engine: str, argv: list[str]) -> list[Finding]:
    """Every finding for the arguments after the command (`sglang serve`, `vllm serve`,
    `ray start`), in argv order."""
    table = load_table(engine)
    found: list[Finding] = []
    free = list(table.positionals)
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--" or not _looks_like_option(table, token):
            if free:
                free.pop(0)
            else:
                found.append(Finding("error", token, f"{table.label}: unrecognized "
                                     f"arguments: {token}"))
            i += 1
            continue
        more, i = _check_option(table, argv, i)
        found += more
    return found


def check_flags(engine: str, flags: Mapping[str, object]) -> list[tuple[str, Finding]]:
    """Inventory-style flags ({'tp-size': 8, 'enable-foo': True}) as k3deploy renders them
    (True: the bare flag; None: removed), each finding keyed by its flag name."""
    table, out = load_table(engine), []
    for key, value in flags.items():
        if value is None or value is False:
            continue
        name = key if key.startswith("-") else f"--{key}"
        opt = resolve(table, name)[0]
        if opt is not None and not opt["takes_value"] and value is not True:
            out.append((key, Finding("error", name, f"{table.label}: {name} takes no value; "
                                     "set it to true, or null to drop it")))
            continue
        argv = [name] if value is True else [name, str(value)]
        out += [(key, f) for f in check_argv(engine, argv)]
    return out


def check_sglang_config(mapping: Mapping[str, object]) -> list[Finding]:
    """A `--config` YAML mapping as SGLang's ConfigArgumentMerger reads it: a key whose
    action it cannot map is refused; every other key becomes `--KEY` as written (so
    `api_key` is an unknown option) and goes through the parser like the command line."""
    table = load_table("sglang")
    merger: ConfigMerger = table.config_merger or {}
    out = []
    for key, value in mapping.items():
        norm = key.replace("-", "_")
        if norm in merger.get("unsupported_keys", ()):
            out.append(Finding("error", key, f"{table.label} --config: Unsupported config "
                               f"option {norm!r}"))
            continue
        argv = _merged_argv(key, value, norm in merger.get("store_true_keys", ()))
        out += [Finding(f.level, key, f"--config key {key!r}: {f.message}", f.suggestion)
                for f in check_argv("sglang", argv)]
    return out


def _merged_argv(key: str, value: object, store_true: bool) -> list[str]:
    flag = f"--{key}"
    if isinstance(value, bool):
        if store_true:
            return [flag] if value else []
        return [flag, str(value).lower()]
    if isinstance(value, list):
        return [flag, *map(str, value)] if value else []
    if isinstance(value, dict):
        return [flag, json.dumps(value)]
    return [flag, str(value)]

"""The real engines' option tables (k3deploy/engines/cli_tables/*.json, made from the real
parsers by `scripts/engine-contract refresh`) turned into argparse parsers, so the stand-ins
accept and reject exactly what `sglang serve`, `vllm serve` and `ray start` do.

The testbed copies the tables next to this file (engine/cli_tables/); run from the repo, the
package's own copy is used. Stdlib only.
"""
import argparse
import difflib
import json
import os
import re
import sys

_HERE = os.path.dirname(os.path.realpath(__file__))
_PLACES = [os.path.join(_HERE, "cli_tables"),
           os.path.join(_HERE, "..", "..", "..", "..", "k3deploy", "engines", "cli_tables")]
_UNITS = {"k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}


def load(engine):
    for place in _PLACES:
        path = os.path.join(place, f"{engine}.json")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                return json.load(f)
    raise FileNotFoundError(f"no CLI table for {engine} in {_PLACES}")


def human_int(text):
    """vLLM's and SGLang's human-readable ints: 1k = 1000, 1K = 1024, 1m = 10**6, 1M = 2**20."""
    if text and text[-1] in _UNITS:
        return int(float(text[:-1]) * _UNITS[text[-1]])
    return int(text)


def human_int_or_auto(text):
    return None if text == "auto" else human_int(text)


def click_bool(text):
    value = text.strip().lower()
    if value in ("1", "true", "t", "yes", "y", "on"):
        return True
    if value in ("0", "false", "f", "no", "n", "off"):
        return False
    raise ValueError(text)


TYPES = {"int": int, "float": float, "human_readable_int": human_int,
         "human_readable_int_or_auto": human_int_or_auto, "bool": click_bool}


class TableAction(argparse.Action):
    """One option from the table: stores its value(s); a flag stores True (False for its
    --no-/--disable- spelling); a deprecated option warns (or stops) as upstream does."""

    def __init__(self, option_strings, dest, spec=None, **kwargs):
        self.spec = spec
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        dep = self.spec.get("deprecated")
        if dep and dep.get("fatal"):
            parser.error(dep["message"])
        if dep and dep.get("source") != "help":
            sys.stderr.write(f"WARNING {dep['message']}\n")
        if self.nargs == 0:
            values = option_string not in self.spec.get("negative_option_strings", [])
        setattr(namespace, self.dest, values)


def _add(parser, spec):
    convert = TYPES.get(spec.get("type") or "")
    if spec["dest"] == "help":
        parser.add_argument(*spec["option_strings"], action="help")
        return
    shown = argparse.SUPPRESS if spec.get("hidden") else None
    if spec.get("action") == "BooleanOptionalAction":
        positive = [o for o in spec["option_strings"] if o not in spec["negative_option_strings"]]
        parser.add_argument(*positive, action=argparse.BooleanOptionalAction, help=shown,
                            dest=spec["dest"], default=spec.get("default"))
        return
    kwargs = {"dest": spec["dest"], "nargs": spec["nargs"], "default": spec.get("default"),
              "help": shown}
    if spec["nargs"] != 0:
        kwargs["type"] = convert
        choices = spec.get("choices")
        if choices:
            kwargs["choices"] = [convert(c) for c in choices] if convert else choices
    parser.add_argument(*spec["option_strings"], action=TableAction, spec=spec,
                        required=spec.get("required", False), **kwargs)


def build(engine, parser_class=argparse.ArgumentParser, prog=None, usage=None):
    table = load(engine)
    meta = table["parser"]
    parser = parser_class(prog=prog or table["command"], usage=usage, add_help=False,
                          allow_abbrev=meta["allow_abbrev"])
    for spec in table["options"]:
        if not spec.get("wrapper"):     # taken off argv before the parser (strip_wrapper)
            _add(parser, spec)
    for spec in table["positionals"]:
        parser.add_argument(spec["dest"], nargs=spec["nargs"], default=spec.get("default"))
    parser.table = table
    return parser


def strip_wrapper(table, argv):
    """argv without the options the CLI wrapper consumes before its parser runs (SGLang's
    `sglang serve` takes `--model-type X` off); returns (argv, {dest: value})."""
    wrappers = {o: spec for spec in table["options"] if spec.get("wrapper")
                for o in spec["option_strings"]}
    rest, taken, i = [], {}, 0
    while i < len(argv):
        name, eq, inline = argv[i].partition("=")
        if name in wrappers:
            value = inline if eq else (argv[i + 1] if i + 1 < len(argv) else None)
            if value is None:
                raise SystemExit(f"Error: {name} requires a value.")
            taken[wrappers[name]["dest"]] = value
            i += 1 if eq else 2
            continue
        rest.append(argv[i])
        i += 1
    return rest, taken


_UNDERSCORED = re.compile(r"(?<=--)[^.=]*")


def normalise(table, argv):
    """vLLM's FlexibleArgumentParser reads `--a_b` as `--a-b`; SGLang's parser does not."""
    if not table["parser"].get("underscores_as_dashes"):
        return list(argv)
    return [_UNDERSCORED.sub(lambda m: m.group(0).replace("_", "-"), a, count=1)
            if a.startswith("--") else a for a in argv]


class ClickStyleParser(argparse.ArgumentParser):
    """Errors as click (8.1) prints them for `ray start`: usage, help hint, exit 2."""

    def error(self, message):
        if "unrecognized arguments" in message:
            name = message.split(": ", 1)[1].split()[0].split("=")[0]
            message = f"No such option: {name}" + self._close(name)
        sys.stderr.write(f"Usage: {self.prog} [OPTIONS]\nTry '{self.prog} --help' for help.\n\n"
                         f"Error: {message}\n")
        sys.exit(2)

    def _close(self, name):
        longs = [s for s in self._option_string_actions if s.startswith("--")]
        close = difflib.get_close_matches(name, longs)
        if len(close) == 1:
            return f" Did you mean {close[0]}?"
        return f" (Possible options: {', '.join(sorted(close))})" if close else ""

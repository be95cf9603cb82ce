"""Dump one engine CLI's option table as JSON. Runs INSIDE the throwaway virtualenv that
`scripts/engine-contract refresh` builds (it imports the real engines), never in k3deploy's.

    python engine_contract_dump.py {sglang|vllm|ray} OUT.json

Every table has the same shape (k3deploy/engines/cli_contract.py reads it):
options[]: option_strings, dest, nargs (argparse's: null = one value, 0 = none, "?", "*",
"+", N), takes_value, choices (the parser's order), type, default (when JSON-able),
deprecated {message, replacement, fatal, source}, negative_option_strings (a --no-X spelling
stores False), action (class name), hidden (help suppressed), wrapper (taken off argv by the
CLI before its parser). Options keep the parser's registration order.
"""
import argparse
import importlib.metadata
import json
import platform
import sys

SIMPLE_TYPES = {int: "int", float: "float", str: "str", bool: "bool"}


def jsonable(value):
    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError):
        return False


def type_name(kind):
    if kind is None:
        return None
    return SIMPLE_TYPES.get(kind) or getattr(kind, "__name__", type(kind).__name__)


def argparse_deprecation(action, parser):
    """The text the parser prints (or the help says) when this option is used."""
    cls = type(action).__name__
    new_flag = getattr(action, "new_flag", None)
    opt = action.option_strings[0]
    if cls == "DeprecatedAction" and getattr(action, "error_message", None):
        return {"message": action.error_message, "replacement": None, "fatal": True,
                "source": cls}
    if cls.startswith("Deprecated"):
        tail = f" Use '{new_flag}' instead." if new_flag else ""
        return {"message": f"'{opt}' is deprecated and will be removed in a future release."
                f"{tail}", "replacement": new_flag, "fatal": False, "source": cls}
    if action in getattr(parser, "_deprecated", ()) or getattr(action, "deprecated", False):
        return {"message": f"argument '{action.dest}' is deprecated", "replacement": None,
                "fatal": False, "source": "argparse deprecated=True"}
    help_text = (action.help or "").strip()
    if help_text.lower().lstrip("(").startswith("deprecated"):
        # Documented as deprecated but the parser prints nothing: still worth a warning.
        return {"message": help_text, "replacement": None, "fatal": False, "source": "help"}
    return None


def argparse_option(action, parser):
    nargs = action.nargs
    # Every spelling the parser accepts, hidden ones too (vLLM keeps --no-enable-x
    # registered but out of the help).
    spellings = [o for o, a in parser._option_string_actions.items() if a is action]
    strings = list(action.option_strings) + [o for o in spellings if o not in action.option_strings]
    negatives = []
    if isinstance(action, argparse.BooleanOptionalAction):
        negatives = sorted(getattr(action, "negative_option_strings", None)
                           or [o for o in strings if o.startswith("--no-")])
    entry = {
        "option_strings": strings,
        "dest": action.dest,
        "nargs": nargs,
        "takes_value": nargs != 0,
        "choices": _choices(action.choices),
        "type": type_name(action.type),
        "required": bool(action.required),
        "deprecated": argparse_deprecation(action, parser) if strings else None,
        "negative_option_strings": negatives,
        "action": type(action).__name__,
        "hidden": action.help == argparse.SUPPRESS,
    }
    if action.default is not argparse.SUPPRESS and jsonable(action.default):
        entry["default"] = action.default
    return entry


def _choices(choices):
    """As the parser lists them (a set has no order of its own: sorted)."""
    if not choices:
        return None
    return sorted(map(str, choices)) if isinstance(choices, (set, frozenset)) else \
        [str(c) for c in choices]


def argparse_table(parser):
    options = [argparse_option(a, parser) for a in parser._actions if a.option_strings]
    positionals = [argparse_option(a, parser) for a in parser._actions if not a.option_strings]
    return {"parser": {"kind": "argparse", "prog": parser.prog,
                       "allow_abbrev": parser.allow_abbrev,
                       "prefix_chars": parser.prefix_chars},
            "options": options, "positionals": positionals}


def sglang():
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger, _config_keys

    # prepare_server_args builds exactly this parser for `sglang serve`.
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    table = argparse_table(parser)
    # sglang/cli/serve.py strips --model-type (backend selector) before the parser sees argv,
    # and turns a leading positional into --model-path.
    table["options"].append({"option_strings": ["--model-type"], "dest": "model_type",
                             "nargs": None, "takes_value": True, "choices": None,
                             "type": "str", "required": False, "deprecated": None,
                             "negative_option_strings": [], "default": "auto",
                             "wrapper": "sglang.cli.serve._extract_model_type_override"})
    table["config_merger"] = config_merger_keys(parser, ConfigArgumentMerger, _config_keys)
    return table, "sglang", "sglang.srt.server_args.ServerArgs.add_cli_args"


def config_merger_keys(parser, merger_cls, config_keys):
    """How a `--config` YAML is read: each key becomes `--KEY` exactly as written (so
    `api-key`, not `api_key`), after the merger refuses keys whose action it cannot map
    (matched after `-` -> `_`); booleans of store_true keys become the bare flag."""
    merger = merger_cls(parser)
    exact = set()
    for action in parser._actions:
        keys = config_keys(action)
        if keys & set(merger.unsupported_actions) or "help" in keys or "config" in keys:
            continue
        exact |= {o[2:] for o in action.option_strings if o.startswith("--")}
    sample = merger._convert_config_to_args({"api-key": "k3deploy-sample"})
    return {"key_to_flag": "--KEY, the key as written",
            "match_normalise": "key.replace('-', '_')",
            "exact_keys": sorted(exact),
            "store_true_keys": sorted(set(merger.store_true_actions)),
            "unsupported_keys": sorted(merger.unsupported_actions),
            "example": {"yaml": {"api-key": "<key>"}, "argv": sample[:1] + ["<key>"],
                        "dest": _dest_set(parser, sample)}}


def _dest_set(parser, sample):
    parsed = vars(parser.parse_args(sample + ["--model-path", "m"]))
    return next(k for k, v in parsed.items() if v == "k3deploy-sample")


def cuda_like_platform():
    """DeviceConfig's defaults need an accelerator: a CUDA-shaped Platform object, without
    loading vllm's CUDA extension (which needs libcuda)."""
    import vllm.platforms as platforms
    from vllm.platforms.interface import Platform, PlatformEnum

    class CudaLike(Platform):
        _enum = PlatformEnum.CUDA
        device_name = "cuda"
        device_type = "cuda"
        dispatch_key = "CUDA"
        ray_device_key = "GPU"
        dist_backend = "nccl"
        device_control_env_var = "CUDA_VISIBLE_DEVICES"

    platforms.current_platform = CudaLike()


def vllm():
    cuda_like_platform()
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    table = argparse_table(parser)
    # FlexibleArgumentParser.parse_args rewrites `--a_b` to `--a-b` and accepts
    # `--json-arg.key value` for dict-valued options.
    table["parser"]["underscores_as_dashes"] = True
    table["parser"]["dotted_json_keys"] = True
    table["parser"]["platform"] = "CUDA-like vllm.platforms.interface.Platform subclass"
    return table, "vllm", "vllm.entrypoints.common.cli_args.make_arg_parser"


def click_option(param):
    is_flag = getattr(param, "is_flag", False) or getattr(param, "count", False)
    kind = param.type
    entry = {
        "option_strings": list(param.opts),
        "dest": param.name,
        "nargs": 0 if is_flag else (None if param.nargs == 1 else param.nargs),
        "takes_value": not is_flag,
        "choices": list(getattr(kind, "choices", None) or []) or None,
        "type": {"integer": "int", "integer range": "int", "float": "float", "text": "str",
                 "boolean": "bool"}.get(
            getattr(kind, "name", ""), getattr(kind, "name", None)),
        "required": bool(param.required),
        "deprecated": None,
        "negative_option_strings": list(param.secondary_opts),
        "multiple": bool(getattr(param, "multiple", False)),
    }
    if getattr(param, "deprecated", False):
        text = param.deprecated if isinstance(param.deprecated, str) else ""
        entry["deprecated"] = {"message": f"DeprecationWarning: The option '{param.name}' is "
                               f"deprecated. {text}".strip(), "replacement": None,
                               "fatal": False, "source": "click deprecated"}
    default = param.default
    if not callable(default) and jsonable(default):
        entry["default"] = default
    return entry


def ray():
    import click
    from ray.scripts.scripts import start

    ctx = click.Context(start, info_name="ray start")
    options = [click_option(p) for p in start.params if isinstance(p, click.Option)]
    options.append({"option_strings": start.get_help_option_names(ctx), "dest": "help",
                    "nargs": 0, "takes_value": False, "choices": None, "type": None,
                    "required": False, "deprecated": None, "negative_option_strings": []})
    table = {"parser": {"kind": "click", "prog": "ray start", "allow_abbrev": False,
                        "prefix_chars": "-"},
             "options": options, "positionals": []}
    return table, "ray", "ray.scripts.scripts.start"


def main():
    engine, out = sys.argv[1], sys.argv[2]
    table, dist, source = {"sglang": sglang, "vllm": vllm, "ray": ray}[engine]()
    # Registration order, as the parser holds them: stable, and the usage line matches.
    doc = {"engine": engine, "command": table["parser"]["prog"],
           "version": importlib.metadata.version(dist), "source": source,
           "generated_by": "scripts/engine-contract refresh",
           "environment": {"python": platform.python_version(),
                           "torch": _version("torch"), "stubs": []},
           **table}
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1, sort_keys=False)
        fh.write("\n")
    print(f"{engine} {doc['version']}: {len(doc['options'])} options -> {out}")


def _version(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    main()

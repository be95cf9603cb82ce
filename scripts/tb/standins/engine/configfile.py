"""`--config FILE` for SGLang and vLLM: a YAML (or JSON) mapping of flag names to values,
turned into argv placed before the command line's own flags, so the command line wins.

This is how k3deploy passes the api key without putting it in argv. PyYAML may be absent on a
node, so this reads the subset such files use: `key: value` lines, comments, quoted strings,
and one-line `[a, b]` lists.
"""
import json

from common import EngineExit


def _scalar(text):
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    if text.lower() in ("true", "yes", "on"):
        return True
    if text.lower() in ("false", "no", "off"):
        return False
    if text.lower() in ("null", "~", ""):
        return None
    return text


def _strip_comment(line):
    quote = None
    for i, ch in enumerate(line):
        if ch in "'\"":
            quote = None if quote == ch else (quote or ch)
        elif ch == "#" and quote is None and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def parse_mapping(text, path):
    """A flat mapping from YAML-subset or JSON text."""
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except ValueError as e:
            raise EngineExit(f"ValueError: could not parse config file {path}: {e}")
        if not isinstance(data, dict):
            raise EngineExit(f"ValueError: config file {path} must contain a mapping")
        return data
    data = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = _strip_comment(raw).rstrip()
        if not line.strip() or line.strip() == "---":
            continue
        key, sep, value = line.partition(":")
        if not sep or raw[:1].isspace() or not key.strip():
            raise EngineExit(f"yaml.scanner.ScannerError: unsupported YAML in {path}, "
                             f"line {number}")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            data[key.strip()] = [_scalar(v) for v in value[1:-1].split(",") if v.strip()]
        else:
            data[key.strip()] = _scalar(value)
    return data


def mapping_to_argv(data, verbatim=False):
    """verbatim: the key as written becomes `--KEY` (SGLang's ConfigArgumentMerger)."""
    argv = []
    for key, value in data.items():
        flag = "--" + (str(key) if verbatim else str(key).replace("_", "-"))
        if value is True:
            argv.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, list):
            argv += [flag] + [str(v) for v in value]
        else:
            argv += [flag, str(value)]
    return argv


def config_argv(ctx, container_path, verbatim=False):
    """The flags a --config file stands for; the file is read through the container's mounts."""
    host = ctx.container.host_path(container_path)
    try:
        if host is None:
            raise FileNotFoundError
        with open(host, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        raise EngineExit("FileNotFoundError: [Errno 2] No such file or directory: "
                         f"'{container_path}'")
    return mapping_to_argv(parse_mapping(text, container_path), verbatim)


def expand_config(ctx, argv, verbatim=False):
    """argv with every `--config FILE` replaced by the file's flags, placed first."""
    from_files, rest, i = [], [], 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--config" and i + 1 < len(argv):
            from_files += config_argv(ctx, argv[i + 1], verbatim)
            i += 2
            continue
        if arg.startswith("--config="):
            from_files += config_argv(ctx, arg.split("=", 1)[1], verbatim)
        else:
            rest.append(arg)
        i += 1
    return from_files + rest

"""`docker run` / `docker exec` flag parsing with pflag's rules (interspersed flags stop at the
image; `--flag=v`, `-dit`, `-eK=V`) and docker's messages for what it rejects."""
import os
import re


class FlagError(Exception):
    """A CLI-side flag error: docker frames it as cobra's FlagErrorFunc (dockercli.flag_error)."""


# long name -> (kind, key); kind: bool | str | list
RUN_FLAGS = {
    "detach": ("bool", "detach"), "name": ("str", "name"), "gpus": ("str", "gpus"),
    "network": ("str", "network"), "net": ("str", "network"), "ipc": ("str", "ipc"),
    "shm-size": ("str", "shm_size"), "ulimit": ("list", "ulimits"),
    "volume": ("list", "volumes"), "env": ("list", "env"), "env-file": ("list", "env_files"),
    "rm": ("bool", "rm"), "restart": ("str", "restart"), "entrypoint": ("str", "entrypoint"),
    "publish": ("list", "publish"), "privileged": ("bool", "privileged"),
    "label": ("list", "labels"), "init": ("bool", "init"), "interactive": ("bool", "interactive"),
    "tty": ("bool", "tty"), "workdir": ("str", "workdir"), "user": ("str", "user"),
}
RUN_SHORT = {"d": "detach", "v": "volume", "e": "env", "p": "publish", "l": "label",
             "i": "interactive", "t": "tty", "w": "workdir", "u": "user"}
EXEC_FLAGS = {"detach": ("bool", "detach"), "env": ("list", "env"), "env-file": ("list", "env_files"),
              "interactive": ("bool", "interactive"), "tty": ("bool", "tty"),
              "workdir": ("str", "workdir"), "user": ("str", "user"), "privileged": ("bool", "privileged")}
EXEC_SHORT = {"d": "detach", "e": "env", "i": "interactive", "t": "tty", "w": "workdir", "u": "user"}

ULIMITS = {"core", "cpu", "data", "fsize", "locks", "memlock", "msgqueue", "nice", "nofile",
           "nproc", "rss", "rtprio", "rttime", "sigpending", "stack"}
SIZE_RE = re.compile(r"^(\d+(?:\.\d+)*) ?([kKmMgGtTpP])?[iI]?[bB]?$")
VOLUME_OPTS = {"ro", "rw", "z", "Z", "shared", "rshared", "slave", "rslave", "private",
               "rprivate", "nocopy", "consistent", "cached", "delegated"}


def _bool_value(flag, value):
    if value in (None, "true", "1", "t", "T", "TRUE", "True"):
        return True
    if value in ("false", "0", "f", "F", "FALSE", "False"):
        return False
    raise FlagError(f'invalid argument "{value}" for "--{flag}" flag: strconv.ParseBool: '
                    f'parsing "{value}": invalid syntax')


def parse(argv, flags, short):
    """-> (options dict, positionals). Flags end at the first positional, as `docker run` does."""
    opts = {key: ([] if kind == "list" else False if kind == "bool" else None)
            for kind, key in flags.values()}
    args = list(argv)
    while args and args[0].startswith("-") and args[0] != "-":
        arg = args.pop(0)
        if arg == "--":
            break
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if name not in flags:
                raise FlagError(f"unknown flag: --{name}")
            _set(opts, flags[name], name, value if eq else None, args, f"--{name}")
        else:
            _parse_shorts(arg[1:], opts, flags, short, args)
    return opts, args


def _parse_shorts(chars, opts, flags, short, args):
    i = 0
    while i < len(chars):
        c = chars[i]
        if c not in short:
            raise FlagError(f"unknown shorthand flag: '{c}' in -{chars}")
        name = short[c]
        kind = flags[name][0]
        rest = chars[i + 1:]
        if kind == "bool":
            value = rest[1:] if rest.startswith("=") else None
            _set(opts, flags[name], name, value, args, f"'{c}' in -{chars}")
            if value is not None:
                return
            i += 1
            continue
        value = rest[1:] if rest.startswith("=") else rest
        _set(opts, flags[name], name, value or None, args, f"'{c}' in -{chars}")
        return


def _set(opts, spec, name, value, args, label):
    kind, key = spec
    if kind == "bool":
        opts[key] = _bool_value(name, value)
        return
    if value is None:
        if not args:
            raise FlagError(f"flag needs an argument: {label}")
        value = args.pop(0)
    if kind == "list":
        opts[key].append(value)
    else:
        opts[key] = value


def size_bytes(text, flag):
    m = SIZE_RE.match(text)
    if not m:
        raise FlagError(f"invalid argument \"{text}\" for \"--{flag}\" flag: invalid size: '{text}'")
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
    return int(float(m.group(1)) * mult.get((m.group(2) or "").lower(), 1))


def ulimit(text):
    name, eq, limits = text.partition("=")
    bad = f'invalid argument "{text}" for "--ulimit" flag: '
    if not eq:
        raise FlagError(bad + f"invalid ulimit argument: {text}")
    if name not in ULIMITS:
        raise FlagError(bad + f"invalid ulimit type: {name}")
    soft, _, hard = limits.partition(":")
    try:
        soft_n = int(soft)
        hard_n = int(hard) if hard else soft_n
    except ValueError:
        raise FlagError(bad + f'strconv.ParseInt: parsing "{limits}": invalid syntax') from None
    if soft_n > hard_n and hard_n != -1:
        raise FlagError(bad + f"ulimit soft limit must be less than or equal to hard limit: {soft_n} > {hard_n}")
    return {"Name": name, "Soft": soft_n, "Hard": hard_n}


def gpu_request(text):
    """--gpus value -> (count or None, [device ids] or None)."""
    value = text.strip('"')
    bad = f'invalid argument "{text}" for "--gpus" flag: '
    if value == "all":
        return -1, None
    if value.isdigit():
        return int(value), None
    if value.startswith("device="):
        ids = [d for d in value[len("device="):].split(",") if d]
        if ids:
            return None, ids
    raise FlagError(bad + f"unexpected key '{value.split('=')[0]}' in '{value}'")


def volume(text):
    parts = text.split(":")
    if len(parts) == 1 and parts[0].startswith("/"):
        return {"host": None, "container": parts[0], "ro": False}
    if len(parts) not in (2, 3) or not parts[1].startswith("/") or not parts[0]:
        raise FlagError(f"invalid volume specification: '{text}'")
    options = parts[2].split(",") if len(parts) == 3 else []
    if any(o not in VOLUME_OPTS for o in options):
        raise FlagError(f"invalid mode: {parts[2]}")
    return {"host": parts[0], "container": parts[1], "ro": "ro" in options}


def env_from_files(paths, client_env):
    """--env-file contents, read the way docker does: no quote handling, `KEY` alone inherits."""
    pairs = []
    for path in paths:
        try:
            with open(path) as f:
                lines = f.read().splitlines()
        except OSError as e:
            raise FlagError(f"open {path}: {os.strerror(e.errno).lower()}") from None
        for line in lines:
            line = line.lstrip()
            if not line or line.startswith("#"):
                continue
            pairs.extend(env_pairs([line], client_env))
    return pairs


def env_pairs(items, client_env):
    pairs = []
    for item in items:
        key, eq, value = item.partition("=")
        if not key:
            raise FlagError(f"invalid environment variable: {item}")
        if any(ch.isspace() for ch in key):
            raise FlagError(f"variable '{key}' contains whitespaces")
        if eq:
            pairs.append((key, value))
        elif key in client_env:
            pairs.append((key, client_env[key]))
    return pairs


def restart_policy(text):
    name, _, count = (text or "no").partition(":")
    if name not in ("no", "always", "unless-stopped", "on-failure") or count and (
            name != "on-failure" or not count.isdigit()):
        raise FlagError(f"invalid restart policy format: {text}")
    return {"Name": name, "MaximumRetryCount": int(count or 0)}

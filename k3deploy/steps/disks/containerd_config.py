"""containerd's /etc/containerd/config.toml: its `root` (where the containerd image store keeps
images, compressed and unpacked) read and set, every other line kept as it is.

`root` is a top-level key, default /var/lib/containerd (containerd/containerd
docs/man/containerd-config.toml.5.md@000708dc); the containerd.io package that docker-ce
installs ships the file with `disabled_plugins = ["cri"]` and `#root = ...` commented out
(docker/containerd-packaging common/containerd.toml@655193435b87). containerd reads it only
when it starts.
"""

from __future__ import annotations

import re
import tomllib

from k3deploy.node import facts as F

PATH = "/etc/containerd/config.toml"
DEFAULT_ROOT = "/var/lib/containerd"
_TABLE = re.compile(r"^\s*\[")
_ROOT = re.compile(r"^\s*root\s*=")


class ConfigError(ValueError):
    """config.toml is not TOML, or its root could not be set."""


def read(out: str, code: int) -> str:
    """The file's text ('' when there is none: containerd runs on defaults)."""
    return out if code == 0 else ""


def fact() -> F.Fact[str]:
    return F.read("containerd_toml", PATH, read, sudo=True)


def root_of(text: str) -> str:
    try:
        root = tomllib.loads(text).get("root")
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{PATH} is not valid TOML ({err})") from None
    return root if isinstance(root, str) and root else DEFAULT_ROOT


def with_root(text: str, root: str) -> str:
    """The same file with the top-level `root` set: its line replaced, or a new line before
    the first table (top-level keys must precede every table in TOML)."""
    lines = text.splitlines()
    first_table = next((i for i, line in enumerate(lines) if _TABLE.match(line)), len(lines))
    setting = f"root = {_toml_string(root)}"
    at = next((i for i in range(first_table) if _ROOT.match(lines[i])), None)
    if at is None:
        lines[first_table:first_table] = [setting, ""] if first_table < len(lines) else [setting]
    else:
        lines[at] = setting
    out = "\n".join(lines) + "\n"
    if root_of(out) != root:
        raise ConfigError(f"could not set root in {PATH}")
    return out


def _toml_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'

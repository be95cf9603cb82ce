"""Facts: small remote probes, each a shell snippet and a parser.

A step asks for all the facts it needs in ONE round trip: the snippets are joined into one
script with section markers, and each parser gets only its own section's output and exit code.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

MARK = "@@k3fact@@"


@dataclass(frozen=True)
class Fact:
    name: str
    script: str                      # POSIX sh; may fail, its exit code is recorded
    parse: Callable[[str, int], Any]  # (output, exit code) -> value
    sudo: bool = False


def compose(facts: list[Fact]) -> str:
    parts = []
    for fact in facts:
        body = fact.script if not fact.sudo else _sudo(fact.script)
        parts.append(f"echo {MARK}begin {fact.name}; ( {body} ) 2>&1; echo {MARK}end $?")
    return "\n".join(parts)


def _sudo(script: str) -> str:
    # Root needs no sudo; elsewhere non-interactive sudo so a missing rule fails, not hangs.
    quoted = shlex.quote(script)
    return f'if [ "$(id -u)" = 0 ]; then sh -c {quoted}; else sudo -n sh -c {quoted}; fi'


_SECTION = re.compile(rf"{MARK}begin (\S+)\n(.*?){MARK}end (\d+)", re.S)


def parse_output(facts: list[Fact], output: str) -> dict[str, Any]:
    sections = {m.group(1): (m.group(2), int(m.group(3))) for m in _SECTION.finditer(output)}
    values = {}
    for fact in facts:
        text, code = sections.get(fact.name, ("", 255))
        values[fact.name] = fact.parse(text, code)
    return values


def gather(conn, facts: list[Fact], step: str | None = None) -> dict[str, Any]:
    result = conn.run(["sh", "-c", compose(facts)], check=False, retry=True, step=step)
    return parse_output(facts, result.stdout)


# -- common parsers ----------------------------------------------------------------------
def text(out: str, code: int) -> str | None:
    return out.strip() if code == 0 else None


def lines(out: str, code: int) -> list[str]:
    return [ln for ln in out.splitlines() if ln.strip()] if code == 0 else []


def exit_ok(_out: str, code: int) -> bool:
    return code == 0


def integer(out: str, code: int) -> int | None:
    try:
        return int(out.strip().split()[0]) if code == 0 else None
    except (ValueError, IndexError):
        return None


def command(name: str, argv: list[str], parse=text, sudo: bool = False) -> Fact:
    return Fact(name, shlex.join(argv), parse, sudo)

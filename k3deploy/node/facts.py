"""Facts: small remote probes, each a shell snippet and a parser.

Facts are asked for in ONE round trip per node: the snippets (of one step, or of every step of
a playbook at once, each under its own prefix) are joined into one script with section markers,
and each parser gets only its own section's output and exit code. The script travels on the
command's stdin, not in argv: no length limit, and a fact's own input (a program, an API key)
goes in a here-document that no `ps` on the node shows.
"""

from __future__ import annotations

import re
import shlex
import hashlib
import secrets
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Generic, TypeVar, overload
from collections.abc import Callable, Sequence

from k3deploy.facts import Probe
from k3deploy.remote import for_argv, script_text
from k3deploy.remote.protocol import FactJob

if TYPE_CHECKING:
    from k3deploy.node.transport import NodeConnection

MARK = "@@k3fact@@"
# fact name -> its parsed value: what a look returns (object: each fact parses to its own
# type, which only the step that asked for it knows)
Found = dict[str, object]
T = TypeVar("T")
# Covariant (a frozen record whose value only comes out of `parse`): a step's probes are one
# list[Fact[object]] of facts of every value type (steps/base.py).
T_co = TypeVar("T_co", covariant=True)


@dataclass(frozen=True)
class Fact(Generic[T_co]):
    name: str
    script: str                      # POSIX sh; may fail, its exit code is recorded
    parse: Callable[[str, int], T_co]  # (output, exit code) -> value
    sudo: bool = False
    stdin: str | None = field(default=None, repr=False)   # may hold a secret: never printed
    # A Python program and its argv (`python`): run in the batch's one interpreter.
    program: tuple[str, tuple[str, ...]] | None = field(default=None, repr=False)
    # Or one of that interpreter's built-in operations (`native`) and its arguments.
    op: tuple[str, tuple[str, ...]] | None = None
    # How an earlier step's batch asks it: True as it is; False never (only in its own
    # step's look); or a bounded form of it. A request an engine answers only by a forward
    # step over every rank (verify's chat) never returns from a group whose rank vanished,
    # and unbounded would hold up every step's facts with it.
    ahead: bool | Fact[T_co] = True

    def asked_ahead(self, first: bool = True) -> Fact[T_co] | None:
        """What an earlier step's batch asks in this fact's place (under its name), if any.
        A bounded form only in the node's first look of a run (`first`): that look is the
        one a run that changes nothing makes; a later batch follows a change, so the step
        looks itself anyway and a stuck engine would hold up every such batch by the bound."""
        if isinstance(self.ahead, Fact):
            return replace(self.ahead, name=self.name) if first else None
        return self if self.ahead else None


def _first_asker(facts: Sequence[Fact[object]]) -> dict[str, str]:
    """fact name -> the name whose section answers it: the same command asked by several
    steps (nvidia-smi, docker inspect) runs once per batch."""
    first: dict[tuple[str, bool, str | None], str] = {}
    return {f.name: first.setdefault((f.script, f.sudo, f.stdin), f.name) for f in facts}


def compose(facts: Sequence[Fact[object]]) -> str:
    """Every fact runs at once (they only read), each into its own file between its markers;
    then one `cat` prints the files in order. A batch takes its slowest fact's time. Forks are
    what a batch costs the node (dozens of facts on every node at once): none is spent per
    fact on printing, or on `id -u` for every sudo fact, and the Python facts share one
    interpreter (remote/fact_runner.py), which writes their files in the same format."""
    asker = _first_asker(facts)
    unique = [f for f in facts if asker[f.name] == f.name]
    runs: list[str] = []
    jobs: list[FactJob] = []
    for i, fact in enumerate(unique):
        if fact.op:
            jobs.append((f"{i:05d}", fact.name, None, fact.op[1], None, fact.op[0],
                         fact.script if fact.sudo else None))
            continue
        if fact.program and not fact.sudo:
            jobs.append((f"{i:05d}", fact.name, fact.program[0], fact.program[1], fact.stdin,
                         None, None))
            continue
        body = fact.script if not fact.sudo else _sudo(fact.script)
        # Every fact reads its own here-document or nothing: never the script being run.
        runs.append(f'{{ echo {MARK}begin {fact.name}; ( {body} ) 2>&1 {_line_end(fact, i)}')
    if jobs:
        runs.append(_python_facts(jobs))
    return "\n".join(['k3d=$(mktemp -d) || exit 1', 'trap \'rm -rf "$k3d"\' EXIT',
                      'k3uid=$(id -u)', *runs, "wait", 'cat "$k3d"/*']) + "\n"


def _python_facts(jobs: list[FactJob]) -> str:
    """One `python3 -` for every Python fact; its source (programs and their input, which
    may hold a key) is a here-document, like any fact's input."""
    source = script_text("fact_runner.py") + f"\nrun(sys.argv[1], {MARK!r}, {jobs!r})\n"
    end = f"K3EOF{secrets.token_hex(8)}"
    return f"python3 - \"$k3d\" > /dev/null 2>&1 <<'{end}' &\n{source}{end}\n"


def _line_end(fact: Fact[object], i: int) -> str:
    """The fact's input and the rest of its line (a here-document's text follows the line).
    Files named in fact order: the glob in `cat` keeps it."""
    done = f'; echo "{MARK}end $?"; }} > "$k3d/{i:05d}" &'
    if fact.stdin is None:
        return "< /dev/null" + done + "\n"
    end = f"K3EOF{secrets.token_hex(8)}"
    text = fact.stdin if fact.stdin.endswith("\n") else fact.stdin + "\n"
    return f"<<'{end}'" + done + f"\n{text}{end}\n"


def _sudo(script: str) -> str:
    # Root needs no sudo (nor a shell of its own: the fact runs in a subshell already);
    # elsewhere non-interactive sudo, so a missing rule fails, not hangs.
    quoted = shlex.quote(script)
    return f'if [ "$k3uid" = 0 ]; then\n{script}\nelse sudo -n sh -c {quoted}; fi'


_SECTION = re.compile(rf"{MARK}begin (\S+)\n(.*?){MARK}end (\d+)", re.S)


def parse_output(facts: Sequence[Fact[object]], output: str) -> Found:
    sections = {m.group(1): (m.group(2), int(m.group(3))) for m in _SECTION.finditer(output)}
    values: Found = {}
    asker = _first_asker(facts)
    for fact in facts:
        text, code = sections.get(asker[fact.name], ("", 255))
        values[fact.name] = fact.parse(text, code)
    return values


def gather(conn: NodeConnection, facts: Sequence[Fact[object]], step: str | None = None,
           timeout: float | None = None) -> Found:
    if not facts:
        return {}
    result = conn.run(["sh", "-s"], stdin=compose(facts), check=False, retry=True, step=step,
                      timeout=timeout)
    return parse_output(facts, result.stdout)


def _q(paths: Sequence[str]) -> str:
    return shlex.join(paths)


# The shell command each of remote/fact_runner.py's OPS answers like: what the batch dedupes
# by, and what runs under sudo for a login that is not root. The arguments (strings) are as
# many as that command takes, as OPS's.
SHELL_OF_OP: dict[str, Callable[..., str]] = {
    "cat": lambda *p: f"cat {_q(p)}",
    "cat_quiet": lambda *p: f"cat {_q(p)} 2>/dev/null",
    "sha256": lambda *p: f"sha256sum {_q(p)}",
    "sha256_present": lambda *p: f"sha256sum {_q(p)} 2>/dev/null; true",
    "sha256_hex": lambda p: f"sha256sum {shlex.quote(p)} | cut -d' ' -f1",
    "tail": lambda n, p: f"tail -n {int(n)} {shlex.quote(p)}",
    "exists": lambda p: f"test -e {shlex.quote(p)}",
    "is_dir": lambda p: f"test -d {shlex.quote(p)}",
    "realpath": lambda p: f"realpath -m {shlex.quote(p)}",
    "writable": lambda *p: " && ".join(f"test -w {shlex.quote(x)}" for x in p),
    "owner": lambda p: f"stat -c %U {shlex.quote(p)}",
    "login_user": lambda: "id -un",
    "now": lambda: "date +%s",
    "avail_bytes": lambda p: f"df -B1 --output=avail {shlex.quote(p)} | tail -n 1",
    "root_or_sudo": lambda: 'test "$(id -u)" = 0 || sudo -n true',
}


def native(name: str, op: str, args: Sequence[str | int], parse: Callable[[str, int], T],
           sudo: bool = False) -> Fact[T]:
    """A small read (a file, a test, a hash) answered by the batch's Python interpreter
    (remote/fact_runner.py OPS[op]) with no process of its own, as SHELL_OF_OP[op] would."""
    words = tuple(str(a) for a in args)
    return Fact(name, SHELL_OF_OP[op](*words), parse, sudo, op=(op, words))


def read(name: str, path: str, parse: Callable[[str, int], T], sudo: bool = False) -> Fact[T]:
    """`cat PATH`."""
    return native(name, "cat", [path], parse, sudo)


def renamed(facts: Sequence[Fact[T]], prefix: str) -> list[Fact[T]]:
    """The same facts under `prefix` (one step's share of a batch for several steps)."""
    return [replace(f, name=f"{prefix}{f.name}") for f in facts]


def python(name: str, program: str, args: Sequence[str], parse: Callable[[str, int], T],
           stdin: str | None = None, sudo: bool = False) -> Fact[T]:
    """A node-side Python program as a fact: the program is a here-document of the batch
    (not a file to upload, not argv), its input another one."""
    # A fixed end marker per program: the same program with the same input, asked by two
    # steps, is one fact (compose runs it once).
    end = f"K3PY{hashlib.sha256(program.encode()).hexdigest()[:16]}"
    # run as a shell fact (under sudo) the program is in python3's argv, which `ps` shows
    script = (f'prog=$(cat <<\'{end}\'\n{for_argv(program)}{end}\n); '
              f'python3 -c "$prog" {shlex.join(args)}')
    return Fact(name, script, parse, sudo, stdin, program=(program, tuple(args)))


# -- common parsers ----------------------------------------------------------------------
def text(out: str, code: int) -> str | None:
    return out.strip() if code == 0 else None


def raw(out: str, code: int) -> str | None:
    """The output as it is (a log keeps its blank lines and indentation)."""
    return out if code == 0 else None




def exit_ok(_out: str, code: int) -> bool:
    return code == 0


def integer(out: str, code: int) -> int | None:
    try:
        return int(out.strip().split()[0]) if code == 0 else None
    except (ValueError, IndexError):
        return None


@overload
def command(name: str, argv: Sequence[str], *, sudo: bool = False) -> Fact[str | None]: ...
@overload
def command(name: str, argv: Sequence[str], parse: Callable[[str, int], T],
            sudo: bool = False) -> Fact[T]: ...
def command(name: str, argv: Sequence[str], parse: Callable[[str, int], object] = text,
            sudo: bool = False) -> Fact[object]:
    """`argv` as a shell command; its output stripped (text) unless a parser is given."""
    return Fact(name, shlex.join(argv), parse, sudo)


def from_probe(probe: Probe[T]) -> Fact[T]:
    """A k3deploy.facts Probe as a fact of the batch."""
    return Fact(probe.name, probe.script, probe.parse, probe.sudo)

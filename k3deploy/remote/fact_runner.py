"""Node side: every Python fact of a batch in one interpreter (k3deploy/node/facts.py).

A no-op look runs a few small Python programs on each node (the download status, the
huggingface_hub version, the head's endpoint probe); each interpreter start costs more than
the program it runs. Here each program runs in turn with its own argv, stdin text and globals,
its output (stdout and stderr) and exit code written to its own section file, in the format
the batch's shell facts use. The programs write through sys.stdout / sys.stderr and start no
processes that write to the real ones. Standard library only; any python3 >= 3.6.

The small reads (a file, a test, a hash, the time) are built-in operations (OPS): each answers
as its shell command would, output and exit code, without the two forks and the exec a shell
fact costs; dozens of them on every node add up to more CPU than the rest of a no-op look.
One that needs root, asked by a login that is not root, runs its shell command under `sudo -n`.
Its annotations are strings (no `from __future__ import annotations` before 3.7).
"""
import hashlib
import io
import os
import pwd
import sys
import time

# Not `from typing import TYPE_CHECKING`, and subprocess and traceback imported where used: a
# look starts this interpreter on every node every poll, and those three imports cost more
# CPU than the rest of it (~10 ms of ~25 on the testbed's python3.11). Type checkers treat
# any name TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import TypeAlias

    from protocol import FactJob

    Answer: TypeAlias = tuple[str, int]   # (output, exit code), as the shell command's


def _cat(paths: "Sequence[str]", quiet: bool) -> "Answer":
    out, code = [], 0
    for path in paths:
        try:
            with open(path, "rb") as fh:
                out.append(fh.read().decode("utf-8", "replace"))
        except OSError as err:
            code = 1
            if not quiet:
                out.append(f"cat: {path}: {err.strerror}\n")
    return "".join(out), code


def _sha256(paths: "Sequence[str]", quiet: bool) -> "Answer":
    out, code = [], 0
    for path in paths:
        try:
            with open(path, "rb") as fh:
                out.append(f"{hashlib.sha256(fh.read()).hexdigest()}  {path}\n")
        except OSError as err:
            code = 1
            if not quiet:
                out.append(f"sha256sum: {path}: {err.strerror}\n")
    return "".join(out), (0 if quiet else code)


def _sha256_hex(path: str) -> "Answer":
    text, code = _sha256([path], True)
    return (text.split(" ", 1)[0] + "\n", 0) if text else ("", 1)


def _tail(count: str, path: str) -> "Answer":
    try:
        with open(path, "rb") as fh:
            lines = fh.read().decode("utf-8", "replace").splitlines(True)
    except OSError as err:
        return f"tail: cannot open '{path}' for reading: {err.strerror}\n", 1
    return "".join(lines[-int(count):]), 0


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _owner(path: str) -> "Answer":
    try:
        return _user(os.stat(path).st_uid) + "\n", 0
    except OSError as err:
        return f"stat: cannot statx '{path}': {err.strerror}\n", 1


def _avail(path: str) -> "Answer":
    try:
        st = os.statvfs(path)
    except OSError as err:
        return f"df: {path}: {err.strerror}\n", 1
    return f"{st.f_bavail * st.f_frsize}\n", 0


def _root_or_sudo() -> "Answer":
    if os.geteuid() == 0:
        return "", 0
    import subprocess
    done = subprocess.run(["sudo", "-n", "true"], stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return done.stdout.decode("utf-8", "replace"), done.returncode


# name -> (args -> (output, exit code)), each as the shell command it replaces; the arguments
# (strings) are as many as that command takes: node/facts.py SHELL_OF_OP, keyed alike
OPS: "dict[str, Callable[..., Answer]]" = {
    "cat": lambda *p: _cat(p, False),                 # cat P...
    "cat_quiet": lambda *p: _cat(p, True),            # cat P... 2>/dev/null
    "sha256": lambda *p: _sha256(p, False),           # sha256sum P...
    "sha256_present": lambda *p: _sha256(p, True),    # sha256sum P... 2>/dev/null; true
    "sha256_hex": lambda p: _sha256_hex(p),           # sha256sum P | cut -d' ' -f1
    "tail": _tail,                                    # tail -n N P
    "exists": lambda p: ("", 0 if os.path.exists(p) else 1),           # test -e P
    "is_dir": lambda p: ("", 0 if os.path.isdir(p) else 1),            # test -d P
    "realpath": lambda p: (os.path.realpath(p) + "\n", 0),            # realpath -m P
    "writable": lambda *p: ("", 0 if all(os.access(x, os.W_OK) for x in p) else 1),  # test -w
    "owner": _owner,                                  # stat -c %U P
    "login_user": lambda: (_user(os.geteuid()) + "\n", 0),            # id -un
    "now": lambda: (f"{int(time.time())}\n", 0),       # date +%s
    "avail_bytes": _avail,                            # df -B1 --output=avail P | tail -n 1
    "root_or_sudo": _root_or_sudo,                    # test "$(id -u)" = 0 || sudo -n true
}


def run_op(op: str, args: "Sequence[str]", sudo_script: "str | None") -> "Answer":
    if sudo_script is not None and os.geteuid() != 0:
        import subprocess
        done = subprocess.run(["sudo", "-n", "sh", "-c", sudo_script], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        return done.stdout.decode("utf-8", "replace"), done.returncode
    try:
        return OPS[op](*args)
    except Exception:  # noqa: BLE001 - one operation's failure is its own section's
        import traceback
        return traceback.format_exc(), 1


def _exit_code(code: "str | int | None", out: io.StringIO) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=out)  # sys.exit("message"): the interpreter would print it to stderr
    return 1


def run_one(program: str, name: str, args: "Sequence[str]", stdin: "str | None") -> "Answer":
    """(output, exit code) of one program, as `python3 -c program args < stdin` would give."""
    real = sys.stdin, sys.stdout, sys.stderr, sys.argv
    out, code = io.StringIO(), 0
    sys.stdin, sys.stdout, sys.stderr = io.StringIO(stdin or ""), out, out
    sys.argv = ["-c"] + list(args)
    try:
        exec(compile(program, name, "exec"), {"__name__": "__main__"})
    except SystemExit as stop:
        code = _exit_code(stop.code, out)
    except BaseException:  # noqa: BLE001 - whatever one program raises is its own section's
        import traceback
        traceback.print_exc(file=out)
        code = 1
    finally:
        sys.stdin, sys.stdout, sys.stderr, sys.argv = real
    return out.getvalue(), code


def run(out_dir: str, mark: str, jobs: "list[FactJob]") -> None:
    for file, name, program, args, stdin, op, sudo_script in jobs:
        if op is not None:
            text, code = run_op(op, args, sudo_script)
        elif program is not None:
            text, code = run_one(program, name, args, stdin)
        else:   # node/facts.py compose gives every job one or the other
            text, code = f"job {name}: neither a program nor an operation\n", 1
        with open(os.path.join(out_dir, file), "w", encoding="utf-8") as fh:
            fh.write(f"{mark}begin {name}\n{text}{mark}end {code}\n")

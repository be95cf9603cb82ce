"""Node programs that do end up in a `python3 -c` argv (a Python fact run under sudo) are
shipped without docstrings and comments (remote.for_argv): every `ps` on the node shows argv."""

from __future__ import annotations

import ast

import pytest

from k3deploy.node import facts as F
from k3deploy.remote import for_argv, script_text

PROGRAMS = ["portcheck.py", "endpoint_probe.py", "weights_status.py", "fact_runner.py"]


@pytest.mark.parametrize("name", PROGRAMS)
def test_for_argv_keeps_the_code_and_drops_docstrings_and_comments(name):
    source = script_text(name)
    shipped = for_argv(source)
    assert not [ln for ln in shipped.splitlines() if ln.lstrip().startswith("#")]
    before, after = ast.parse(source), ast.parse(shipped)
    defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    named = [n for n in ast.walk(before) if isinstance(n, defs)]
    assert [n.name for n in named] == [n.name for n in ast.walk(after) if isinstance(n, defs)]
    for node in [before, *named]:
        doc = ast.get_docstring(node)
        assert not doc or doc.splitlines()[0] not in shipped
    assert not [n for n in [after, *ast.walk(after)] if isinstance(n, defs + (ast.Module,))
                and ast.get_docstring(n)]
    assert len(shipped) < 0.9 * len(source)


def test_a_sudo_python_fact_carries_the_stripped_program():
    program = script_text("endpoint_probe.py")
    fact = F.python("probe", program, ["x"], F.text, sudo=True)
    docstring = ast.get_docstring(ast.parse(program))
    assert docstring and docstring.splitlines()[0] not in fact.script
    assert for_argv(program) in fact.script


def test_for_argv_parses_one_program_at_a_time_across_threads(monkeypatch):
    """CPython 3.11's ast keeps a shared recursion counter: two threads parsing at once can
    raise "AST constructor recursion depth mismatch" (gh-106905), which stopped a CI run while
    nodes gathered facts in parallel. No two parses may overlap."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    import k3deploy.remote as remote

    inside, most, lock, real = [0], [0], threading.Lock(), ast.parse

    def watched(source, *args, **kwargs):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.002)
        try:
            return real(source, *args, **kwargs)
        finally:
            with lock:
                inside[0] -= 1

    monkeypatch.setattr(remote.ast, "parse", watched)
    sources = [f'"""doc {i}"""\nx = {i}  # note\n' for i in range(40)]
    with ThreadPoolExecutor(8) as pool:
        shipped = list(pool.map(for_argv, sources))
    assert shipped == [f"x = {i}\n" for i in range(40)]
    assert most[0] == 1


def test_the_round_trip_count_names_each_program_and_the_batched_look():
    from k3deploy.node.ssh_types import program_of as _program
    assert _program("sudo -n -- sh -s") == "sh -s (script on stdin)"
    assert _program("sh -c 'docker info'") == "docker"
    assert _program("python3 -c x") == "python3"

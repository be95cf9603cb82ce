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

"""scripts/typecheck's ratchet (issue 56): mypy's errors are put on the module they are in, by
the name each build knows it by, and the check fails on an error off the list or a listed module
with none; the config it runs mypy with is pyproject's own, less the ignore_errors entry."""

import importlib.machinery
import importlib.util
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _script():
    loader = importlib.machinery.SourceFileLoader("typecheck", str(REPO / "scripts" / "typecheck"))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("typecheck", loader))
    loader.exec_module(module)
    return module


typecheck = _script()


def test_a_file_is_its_package_module_in_the_package_build_and_a_bare_one_in_the_remote_build():
    assert typecheck.module_of("k3deploy/core/group.py", bare=False) == "k3deploy.core.group"
    assert typecheck.module_of("k3deploy/engines/__init__.py", bare=False) == "k3deploy.engines"
    assert typecheck.module_of("k3deploy/remote/protocol.py", bare=False) == "k3deploy.remote.protocol"
    assert typecheck.module_of("k3deploy/remote/protocol.py", bare=True) == "protocol"


def test_an_error_line_names_its_file_and_notes_are_not_errors():
    out = ("k3deploy/run/ui.py:12: error: Missing type arguments for generic type \"dict\"  [type-arg]\n"
           "k3deploy/run/ui.py:12: note: See https://mypy.readthedocs.io\n"
           "k3deploy/remote/guard.py: error: Source file found twice\n")
    assert [m["path"] for m in typecheck.ERROR.finditer(out)] == ["k3deploy/run/ui.py",
                                                                  "k3deploy/remote/guard.py"]
    assert typecheck.SUMMARY.search("Found 3 errors in 2 files (checked 177 source files)\n")
    assert typecheck.SUMMARY.search("Success: no issues found in 37 source files\n")
    assert not typecheck.SUMMARY.search("/usr/bin/python3: No module named mypy\n")


def test_an_error_off_the_list_and_a_clean_module_on_it_both_fail():
    found = {"k3deploy.run.ui": ["e1"], "k3deploy.core.group": ["e2"]}
    new, clean = typecheck.verdict(found, {"k3deploy.run.ui", "k3deploy.core.log"})
    assert new == {"k3deploy.core.group": ["e2"]}
    assert clean == ["k3deploy.core.log"]
    assert typecheck.verdict(found, set(found)) == ({}, [])


def test_the_config_mypy_runs_with_is_pyprojects_without_the_ignore_list():
    config, listed = typecheck.settings()
    written = tomllib.loads(typecheck.toml(config))["tool"]["mypy"]
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    kept = [o for o in pyproject["overrides"] if not o.get("ignore_errors")]
    assert written == {**pyproject, "overrides": kept}
    assert written["strict"] is True
    # Every module is clean: no ignore_errors entry is left for a module to hide on.
    assert listed == set()

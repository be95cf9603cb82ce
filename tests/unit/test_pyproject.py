"""pyproject.toml: `project.license` is an SPDX expression (PEP 639), not the TOML table that
setuptools deprecates (its BuildBackendWarning on every `pip install .`), and the build requires
a setuptools that reads it (>= 77)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.licenses import canonicalize_license_expression
from packaging.requirements import Requirement

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_license_is_an_spdx_expression_and_setuptools_reads_it():
    doc = tomllib.loads(PYPROJECT.read_text())
    license_ = doc["project"]["license"]
    assert isinstance(license_, str)
    assert canonicalize_license_expression(license_) == license_
    (setuptools,) = [Requirement(r) for r in doc["build-system"]["requires"]
                     if Requirement(r).name == "setuptools"]
    assert not setuptools.specifier.contains("76.9") and setuptools.specifier.contains("77.0")

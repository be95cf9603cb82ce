"""Preflight's typed facts for tests: a healthy node's (tests/fixtures/steps/
preflight-all-good.json) with the fields a test changes, given as a fixture gives them."""

from __future__ import annotations

import json
from pathlib import Path

from k3deploy.steps.checks.preflight import Preflight, PreflightFacts
from tests.unit import typed

GOOD = Path(__file__).resolve().parents[1] / "fixtures" / "steps" / "preflight-all-good.json"


def preflight_facts(**changes: object) -> PreflightFacts:
    """Values of `changes` may be typed already (a parser's) or JSON-like (a fixture's)."""
    doc = json.loads(GOOD.read_text())["facts"]
    return typed.facts(Preflight, {**doc, **changes})

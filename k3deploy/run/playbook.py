"""Playbooks: YAML lists of steps with parameters, found by name or path."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import ValidationError

from k3deploy.core.errors import PlaybookError
from k3deploy.steps import step_class
from k3deploy.steps.base import AnyStep

BUILTIN = Path(__file__).parents[1] / "playbooks"


def find(name_or_path: str) -> Path:
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") and path.exists():
        return path
    builtin = BUILTIN / f"{name_or_path}.yaml"
    if builtin.exists():
        return builtin
    known = ", ".join(sorted(p.stem for p in BUILTIN.glob("*.yaml")))
    raise PlaybookError(f"no playbook {name_or_path!r}", hint=f"built-in playbooks: {known}; "
                        "or give a path to a .yaml file")


def _entry(item: object, index: int, path: Path) -> AnyStep:
    """One entry of a playbook's `steps:` (any YAML value: checked here)."""
    params: dict[str, object]
    if isinstance(item, str):
        name, params = item, {}
    elif isinstance(item, dict) and "step" in item:
        name, params = item["step"], item.get("with") or {}
    else:
        raise PlaybookError(f"{path}: steps[{index}] must be a step name or "
                            "{step: NAME, with: {...}}")
    try:
        return step_class(name)(params)
    except ValidationError as err:
        raise PlaybookError(f"{path}: steps[{index}] ({name}): {err.errors()[0]['loc']}: "
                            f"{err.errors()[0]['msg']}") from None
    except PlaybookError as err:
        raise PlaybookError(f"{path}: steps[{index}]: {err}") from None


def load(name_or_path: str) -> tuple[str, list[AnyStep]]:
    path = find(name_or_path)
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise PlaybookError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("steps"), list) or not doc["steps"]:
        raise PlaybookError(f"{path}: a playbook is a mapping with a non-empty `steps:` list")
    steps = [_entry(s, i, path) for i, s in enumerate(doc["steps"])]
    return doc.get("name", path.stem), unique_labels(steps)


def unique_labels(steps: list[AnyStep]) -> list[AnyStep]:
    """A step used twice gets `name#2`: reports and state files key on the label."""
    seen: dict[str, int] = {}
    for step in steps:
        seen[step.label] = seen.get(step.label, 0) + 1
        if seen[step.label] > 1:
            step.label_override = f"{step.label}#{seen[step.label]}"
    return steps

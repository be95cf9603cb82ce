"""Node-side programs are uploaded only when the copy on the node differs: one fact reads their
sha256 (in the step's batched look), and the plan keeps only the uploads that change a file."""

from __future__ import annotations

from collections.abc import Mapping

from k3deploy.core.digest import sha256_text
from k3deploy.node import facts as F
from k3deploy.steps.base import Action

FACT = "node_files"


def fact(paths: list[str], sudo: bool = False) -> F.Fact[dict[str, str]]:
    """{path: sha256} of those files that exist."""
    def parse(out: str, _code: int) -> dict[str, str]:
        pairs = (line.split(None, 1) for line in out.splitlines() if len(line.split(None, 1)) == 2)
        return {path.strip(): sha for sha, path in pairs if len(sha) == 64}
    return F.native(FACT, "sha256_present", paths, parse, sudo=sudo)


def changed_only(actions: list[Action], present: Mapping[str, str] | None) -> list[Action]:
    """The actions without the uploads whose content the node already has."""
    present = present or {}
    return [a for a in actions if not (a.upload_to and present.get(a.upload_to) == sha256_text(a.content))]

"""file: a file on every node with the given content and mode (like Ansible's copy)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from k3deploy.core.digest import sha256_text
from k3deploy.node import facts as F
from k3deploy.node.context import NodeContext
from k3deploy.steps.base import Action, AnyFact, Step, cmd, upload


class FileParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(pattern=r"^/[A-Za-z0-9._/-]+$")
    content: str
    mode: str = Field(default="644", pattern=r"^0?[0-7]{3}$")
    sudo: bool = True


@dataclass(frozen=True)
class FileFacts:
    sha256: str | None   # of the file's content; None (or '') when there is no file
    mode: str | None     # octal, as stat prints it


class EnsureFile(Step[FileFacts, FileParams]):
    name = "file"
    Params = FileParams
    Facts = FileFacts

    def probes(self, node: NodeContext) -> list[AnyFact]:
        path = shlex.quote(self.p.path)
        probe: list[AnyFact] = [
            F.Fact("sha256", f"sha256sum {path} | cut -d' ' -f1", F.text, sudo=self.p.sudo),
            F.Fact("mode", f"stat -c %a {path}", F.text, sudo=self.p.sudo),
        ]
        return probe

    def plan(self, facts: FileFacts, node: NodeContext) -> list[Action]:
        want = sha256_text(self.p.content)
        mode = self.p.mode.lstrip("0") or "0"
        if facts.sha256 != want:
            return [upload(f"write {self.p.path}", self.p.path, self.p.content,
                           mode=int(mode, 8), sudo=self.p.sudo)]
        if facts.mode != mode:
            return [cmd(f"set mode of {self.p.path}", "chmod", mode, self.p.path,
                        sudo=self.p.sudo, retry=True)]
        return []

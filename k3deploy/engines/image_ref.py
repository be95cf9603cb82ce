"""Is an image reference present: the one answer for every step, from `docker inspect`.

Docker reports references in familiar form (no `docker.io/`, no `library/`) and splits them
by kind. The legacy store (overlay2: Docker <= 28 and hosts upgraded from it) keeps a digest
reference only in RepoDigests, tags only in RepoTags (moby daemon/images/image_inspect.go@
docker-v29.1.2); the containerd store (fresh Docker >= 29) lists a digest-pulled name in both
and adds repo@<digest> to RepoDigests for every tag (daemon/containerd/image_inspect.go,
collectRepoTagsAndDigests). A tag is matched in RepoTags, a digest in RepoDigests: both stores
agree there. A reference with a tag and a digest is pulled by its digest, so it is matched by
that.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar


@dataclass(frozen=True)
class ImageRef:
    name: str                 # familiar repository name: lmsysorg/sglang, ubuntu, nvcr.io/x/y
    tag: str | None           # None for a digest reference
    digest: str | None        # sha256:...

    @property
    def wanted(self) -> tuple[str, str]:
        """(the inspect field it is listed in, the familiar string listed there)."""
        if self.digest:
            return "RepoDigests", f"{self.name}@{self.digest}"
        return "RepoTags", f"{self.name}:{self.tag}"


def familiar_name(name: str) -> str:
    for prefix in ("docker.io/library/", "docker.io/", "index.docker.io/library/",
                   "index.docker.io/"):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name.removeprefix("library/")


def parse(ref: str) -> ImageRef:
    """'lmsysorg/sglang:kimi-k3', 'docker.io/lmsysorg/sglang@sha256:..', 'ubuntu' (:latest)."""
    name, _, digest = ref.partition("@")
    tag = None
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name, tag = name.rsplit(":", 1)
    if not digest and tag is None:
        tag = "latest"
    return ImageRef(familiar_name(name), None if digest else tag, digest or None)


def _listed(entry: str) -> str:
    """A RepoTags/RepoDigests entry in the same familiar form (older daemons, other tools)."""
    ref = parse(entry)
    return ref.wanted[1]


# any `docker inspect` object (remote/docker_inspect.InspectDoc or wider): only its two
# reference lists are read here, each narrowed where it is read
Doc = TypeVar("Doc", bound=Mapping[str, object])


def present(ref: str, docs: list[Doc]) -> Doc | None:
    """The `docker inspect` image document `ref` names, or None."""
    field, wanted = parse(ref).wanted
    for doc in docs:
        listed = doc.get(field)
        if isinstance(listed, list) and any(_listed(entry) == wanted for entry in listed
                                            if isinstance(entry, str)):
            return doc
    return None

"""image: the engine image on every node (tag matched to the driver's CUDA); skipped when
already present under the current data-root.

The image crosses the Internet once per cluster: the head pulls it from the registry (Docker
Hub limits anonymous pulls per address), every other node loads it from a peer that holds it
(remote/image_peers.py through the peer server, behind the cluster's peer secret), checked by
what both image stores report alike of the image's config (its ID differs between the legacy
and the containerd store), and pulled instead when the copy cannot be proven; with no peer
holding it (or no peer server: one node, `download.peers: false`) a node pulls. The order is
the runner's: `head_first` runs the head before the others look.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from k3deploy.cluster.fanout import peers_enabled
from k3deploy.core.errors import CommandError, DiskError
from k3deploy.core.jsonvalue import JSON
from k3deploy.engines import image_ref
from k3deploy.facts import docker, record
from k3deploy.node import facts as F
from k3deploy.node.context import NodeContext
from k3deploy.remote import script_text
from k3deploy.remote.protocol import PeerFiles
from k3deploy.steps import probes
from k3deploy.steps.base import Action, AnyFact, Step, cmd, upload
from k3deploy.steps.probes import chosen_image

SCRIPT = script_text("image_peers.py")
# Go's texts for ENOSPC, EDQUOT and EROFS (syscall's errors table): how docker ends an error of
# its data-root's disk, whatever the store (tests/fixtures/real/docker/20.10.5/pull-no-space.txt)
DISK_ERRORS = ("no space left on device", "disk quota exceeded", "read-only file system")


@dataclass(frozen=True)
class ImageFacts:
    cuda: str | None
    images: dict[str, docker.Image]
    image: str = ""                     # derived: the tag this node's CUDA picks

    @property
    def present(self) -> bool:
        return self.image in self.images

    @property
    def id(self) -> str | None:
        mine = self.images.get(self.image)
        return mine.id if mine else None


class PullImage(Step[ImageFacts]):
    name = "image"
    Facts = ImageFacts
    head_first = True   # the head pulls; the others then find it on a peer

    def probes(self, node: NodeContext) -> list[AnyFact]:
        # Ask for every tag the driver could pick (cu13, cu12, or the pinned one) together
        # with the driver's CUDA, then keep the answer for the chosen tag.
        return [probes.cuda(), probes.engine_images(node.inv)]

    def observe(self, found: F.Found, node: NodeContext) -> ImageFacts:
        seen = record(ImageFacts, found)
        return replace(seen, image=chosen_image(seen.cuda, node))

    def plan(self, facts: ImageFacts, node: NodeContext) -> list[Action]:
        if facts.present:
            return []
        peers = [f"{n.name}={n.self_ip}" for _, n in node.inv.ranked() if n.name != node.name]
        # A digest reference is pulled: a loaded image carries no registry digest in the
        # legacy store, so a copy would never count as present.
        if peers and peers_enabled(node.inv) and not image_ref.parse(facts.image).digest:
            path = f"{node.inv.paths.work}/image_peers.py"
            return [upload("upload the image loader", path, SCRIPT, mode=0o644),
                    cmd(f"load {facts.image} from a peer that holds it (proven by its config), "
                        "else pull it", "python3", path, "fetch", "--ref", facts.image,
                        "--peers", ",".join(peers), "--port", str(node.inv.ports.peer),
                        "--secret-file", PeerFiles(node.inv.paths.work).secret, sudo=True,
                        timeout=3600)]
        # A pull is safe to repeat: docker resumes layers it already has.
        return [cmd(f"pull {facts.image}", "docker", "pull", facts.image, sudo=True,
                    retry=True, timeout=3600)]

    def run_action(self, node: NodeContext, action: Action, *more_uploads: Action) -> object:
        """A pull or load that failed on the node's disk is a DiskError: no retry helps."""
        try:
            return super().run_action(node, action, *more_uploads)
        except CommandError as err:
            line = disk_error_line(err.output)
            if line is None:
                raise
            raise DiskError(node.name, f"docker could not store the image: {line}", step=self.name,
                            hint=f"free space on {node.name}'s filesystem of docker's data-root "
                            f"({node.inv.paths.docker}) or grow the disk, then re-run `k3deploy up "
                            f"-i {node.inv.source}`: the layers docker stored are kept") from None

    def detail(self, facts: ImageFacts, node: NodeContext) -> dict[str, JSON] | None:
        return {"image": facts.image, "id": facts.id}


def disk_error_line(output: str) -> str | None:
    """docker's line saying its disk refused a write, or None."""
    return next((line.strip() for line in reversed(output.splitlines())
                 if any(e in line for e in DISK_ERRORS)), None)

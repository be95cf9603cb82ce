"""image: the engine image on every node (tag matched to the driver's CUDA); skipped when
already present under the current data-root."""

from __future__ import annotations

from k3deploy.engines import ImageChoiceError
from k3deploy.core.errors import StepFailed
from k3deploy.steps import probes
from k3deploy.steps.base import Step, cmd
from k3deploy.steps.preflight import image_for


def chosen_image(facts, node) -> str:
    try:
        return image_for(node.inv, facts.get("cuda"))
    except ImageChoiceError as err:
        raise StepFailed(node.name, str(err), step="image") from None


class PullImage(Step):
    name = "image"

    def probes(self, node):
        # Ask for every tag the driver could pick (cu13, cu12, or the pinned one) together
        # with the driver's CUDA, then keep the answer for the chosen tag.
        return [probes.cuda(), probes.engine_images(node.inv)]

    def facts_from(self, found, node):
        image = chosen_image(found, node)
        return {"cuda": found["cuda"], "image": image, "present": image in found["images"]}

    def plan(self, facts, node):
        if facts["present"]:
            return []
        # A pull is safe to repeat: docker resumes layers it already has.
        return [cmd(f"pull {facts['image']}", "docker", "pull", facts["image"], sudo=True,
                    retry=True, timeout=3600)]

    def detail(self, facts, node):
        return {"image": facts["image"]}


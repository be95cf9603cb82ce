"""What a bring-up certificate records of one node, as facts: the engine container (image,
command line, config label, start time), the image's registry digest, per-GPU memory; on the
head also the engine's version as the server reports it (vLLM /version, SGLang
/server_info, else /get_server_info). verify looks at these in its own round trip and keeps them in its record;
`bench` gathers them afresh (serving/certificate_facts.py)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from k3deploy.cluster.inventory import Inventory
from k3deploy.core.jsonvalue import JSON
from k3deploy.engines import CONFIG_LABEL
from k3deploy.facts import http
from k3deploy.facts.docker import Container, Image
from k3deploy.facts.nccl import NcclTransport
from k3deploy.facts.nvidia_smi import Gpu
from k3deploy.steps.base import AnyFact
from k3deploy.node import http_probe
from k3deploy.steps import probes


ENDPOINT_CHECK = "version"


@dataclass(frozen=True)
class CertifyFacts:
    """The facts of `node_probes`, by their names; `endpoint` on the head only (verify's
    checks there include the image probe; `bench` does not send it)."""
    container: Container | None
    images: dict[str, Image]
    gpus: tuple[Gpu, ...] | None
    nccl: NcclTransport | None
    endpoint: http.Endpoint | None = None


def vision_record(result: http.Answer | None) -> dict[str, JSON] | None:
    """What the certificate keeps of the image probe: its status and whether a message came
    back (None: not probed in this round trip)."""
    if result is None:
        return None
    return {"status": result.status,
            "answered": bool(result.message and result.message.content),
            "error": None if result.ok
            else str(result.said or result.error or result.text)[:200]}


def node_probes(inv: Inventory, is_head: bool, key: str | None,
                checks: tuple[str, ...] = ()) -> list[AnyFact]:
    """The same facts the image and launch steps ask for (a batch runs each once); on the head
    one endpoint probe for the engine's version and any further `checks` (verify's)."""
    found: list[AnyFact] = [probes.engine_container(inv), probes.engine_images(inv),
                            probes.gpus(), probes.nccl_transport(inv, is_head)]
    return found + ([http_probe.fact("endpoint", inv, [*checks, ENDPOINT_CHECK], key)]
                    if is_head else [])


def node_record(found: CertifyFacts) -> dict[str, JSON]:
    out: dict[str, JSON] = {**_container_record(found.container, found.images),
           "gpus": [dataclasses.asdict(g) for g in found.gpus or ()], "nccl": _nccl(found.nccl)}
    if found.endpoint is not None:
        version = found.endpoint.version
        out["engine_version"] = (dataclasses.asdict(version.version)
                                 if version and version.ok and version.version else None)
        out["vision"] = vision_record(found.endpoint.vision)
    return out


def _container_record(info: Container | None, images: dict[str, Image]) -> dict[str, JSON]:
    """The engine container's image (and its registry digest), argv, config and start."""
    if info is None:
        return {"image": None, "argv": [], "config_digest": None, "started_at": None,
                "image_digest": None}
    image = images.get(info.image)
    digest = (image.digests[0] if image.digests else image.id) if image else info.image_id
    return {"image": info.image, "argv": list(info.cmd),
            "config_digest": info.labels.get(CONFIG_LABEL), "started_at": info.started,
            "image_digest": digest}


def _nccl(transport: NcclTransport | None) -> dict[str, JSON] | None:
    """The transport NCCL printed on this rank (facts/nccl.py), for the certificate."""
    if transport is None:
        return None
    return {"transport": transport.transport, "devices": list(transport.devices),
            "gpudirect": transport.gpudirect, "gpudirect_evidence": transport.gpudirect_evidence}

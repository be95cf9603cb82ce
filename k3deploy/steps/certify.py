"""What a bring-up certificate records of one node, as facts: the engine container (image,
command line, config label, start time), the image's registry digest, per-GPU memory; on the
head also the engine's version as the server reports it (vLLM /version, SGLang
/server_info, else /get_server_info). verify looks at these in its own round trip and keeps them in its record;
`bench` gathers them afresh (serving/certificate_facts.py)."""

from __future__ import annotations

from k3deploy.engines import CONFIG_LABEL
from k3deploy.facts.docker import Container
from k3deploy.node import facts as F
from k3deploy.node import http_probe
from k3deploy.steps import probes


ENDPOINT_CHECK = "version"
VISION_CHECK = "vision"   # verify's image probe; `bench` does not send it


def vision_record(result: dict | None) -> dict | None:
    """What the certificate keeps of the image probe: its status and whether a message came
    back (None: not probed in this round trip)."""
    if result is None:
        return None
    body = result.get("body") if isinstance(result.get("body"), dict) else {}
    message = ((body.get("choices") or [{}])[0]).get("message") or {}
    return {"status": result.get("status"), "answered": bool(message.get("content")),
            "error": None if result.get("status") == 200
            else str(body.get("message") or (body.get("error") or {}).get("message")
                     or result.get("error") or result.get("body"))[:200]}


def node_probes(inv, is_head: bool, key: str | None,
                checks: tuple[str, ...] = ()) -> list[F.Fact]:
    """The same facts the image and launch steps ask for (a batch runs each once); on the head
    one endpoint probe for the engine's version and any further `checks` (verify's)."""
    found = [probes.engine_container(inv), probes.engine_images(inv),
             probes.gpus(), probes.nccl_transport(inv, is_head)]
    return found + ([http_probe.fact("endpoint", inv, [*checks, ENDPOINT_CHECK], key)]
                    if is_head else [])


def node_record(found: dict) -> dict:
    out = {**_container_record(found.get("container"), found.get("images") or {}),
           "gpus": found.get("gpus") or [], "nccl": _nccl(found.get("nccl"))}
    if "endpoint" in found:
        version = (found["endpoint"] or {}).get(ENDPOINT_CHECK) or {}
        out["engine_version"] = version.get("body") if version.get("status") == 200 else None
        out["vision"] = vision_record((found["endpoint"] or {}).get(VISION_CHECK))
    return out


def _container_record(info: Container | None, images: dict) -> dict:
    """The engine container's image (and its registry digest), argv, config and start."""
    if info is None:
        return {"image": None, "argv": [], "config_digest": None, "started_at": None,
                "image_digest": None}
    image = images.get(info.image) or {"id": info.image_id}
    return {"image": info.image, "argv": list(info.cmd),
            "config_digest": info.labels.get(CONFIG_LABEL), "started_at": info.started,
            "image_digest": (image.get("digests") or [image.get("id")])[0]}


def _nccl(transport) -> dict | None:
    """The transport NCCL printed on this rank (facts/nccl.py), for the certificate."""
    if transport is None:
        return None
    return {"transport": transport.transport, "devices": list(transport.devices),
            "gpudirect": transport.gpudirect}

"""What a certificate records from the cluster, in one SSH round trip per node: the engine
container (image, command line, config label), the image's registry digest, per-GPU memory;
from the head, the engine version as the server reports it (vLLM /version, SGLang
/get_server_info); from the state files, the verify results."""

from __future__ import annotations

import shlex
from concurrent.futures import ThreadPoolExecutor

from k3deploy.node import apikey, http_probe
from k3deploy.node import facts as F
from k3deploy.engines import CONFIG_LABEL
from k3deploy.steps import probes


def _image_digest_fact(container: str) -> F.Fact:
    ref = f"$(docker inspect --format '{{{{.Config.Image}}}}' {shlex.quote(container)})"
    def parse(out: str, code: int):
        data = probes.parse_json(out, code)
        image = data[0] if isinstance(data, list) and data else {}
        return {"id": image.get("Id"), "digests": image.get("RepoDigests") or []}
    return F.Fact("image", f'docker image inspect "{ref}"', parse, sudo=True)


def node_facts(conn, inv) -> dict:
    found = F.gather(conn, [probes.container(inv.engine.container),
                            _image_digest_fact(inv.engine.container), probes.gpus()])
    info = found["container"] or {}
    config = info.get("Config") or {}
    image = found["image"] or {}
    return {"image": config.get("Image"), "argv": list(config.get("Cmd") or []),
            "config_digest": (config.get("Labels") or {}).get(CONFIG_LABEL),
            "started_at": (info.get("State") or {}).get("StartedAt"),
            "image_digest": (image.get("digests") or [image.get("id")])[0],
            "gpus": found["gpus"] or []}


def engine_version(conn, inv, key: str | None) -> dict | None:
    res = http_probe.probe(conn, inv, ["version"], key).get("version") or {}
    return res.get("body") if res.get("status") == 200 else None


def collect(session, inv) -> dict:
    names = [n.name for _, n in inv.ranked()]
    with ThreadPoolExecutor(max_workers=min(32, len(names))) as pool:
        per_node = dict(zip(names, pool.map(lambda n: node_facts(session.conn(n), inv), names)))
    head = per_node[names[0]]
    key = apikey.load_or_create(inv, session.state_dir, create=False)
    return {"head": head,
            "engine_version": engine_version(session.conn(names[0]), inv, key),
            "config_digests": {n: f["config_digest"] for n, f in per_node.items()},
            "gpu_memory_mib": {n: {"rank": inv.rank_of(n),
                                   "used": [g["used_mib"] for g in f["gpus"]],
                                   "total": [g["total_mib"] for g in f["gpus"]]}
                               for n, f in per_node.items()},
            "started_at": {n: f["started_at"] for n, f in per_node.items()}}


def verify_results(session) -> dict:
    out = {}
    for name, state in session.states.items():
        rec = state.data.get("steps", {}).get("verify") or {}
        out[name] = {"status": rec.get("status", "never"), "finished": rec.get("finished"),
                     "error": rec.get("last_error"), "detail": rec.get("detail")}
    return out

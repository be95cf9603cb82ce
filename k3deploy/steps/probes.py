"""Facts several steps share: GPUs, CUDA, docker, the engine container, the HF cache."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from k3deploy.core.errors import EngineImageError, StepFailed
from k3deploy.engines import (ImageChoiceError, docker_logs_argv, image_ref, inventory_image,
                              serve_log_host_path, spec_from_inventory)
from k3deploy.engines import parsers, startup_phases
from k3deploy.engines.layout import inventory_runs_over_ray
from k3deploy.facts import docker, fabric, nccl, nvidia_smi
from k3deploy.facts.lastjson import json_doc
from k3deploy.facts.node_doc import parse_reading
from k3deploy.node import facts as F
from k3deploy.remote import bundled
from k3deploy.remote.protocol import WorkPaths
from k3deploy.steps.base import AnyFact

if TYPE_CHECKING:
    from k3deploy.cluster.inventory import Inventory
    from k3deploy.node.context import NodeContext

def lost_gpu_problems(lost: tuple[nvidia_smi.LostGpu, ...],
                      check: str) -> list[tuple[str, str]]:
    """One finding per lost GPU, named by bus id: only a reboot brings it back."""
    return [(check, f"GPU {gpu.bus_id} is lost (nvidia-smi: \"Unable to determine the "
             f"device handle for GPU{gpu.bus_id}: {gpu.reason}\"): it fell off the bus; "
             "reboot this node to recover it (or replace the node), then re-run")
            for gpu in lost]


parse_json = json_doc


# One `nvidia-smi -q` serves every GPU fact (facts/nvidia_smi.py).
def gpus() -> F.Fact[tuple[nvidia_smi.Gpu, ...] | None]:
    return F.from_probe(nvidia_smi.gpus())


def lost_gpus() -> F.Fact[tuple[nvidia_smi.LostGpu, ...]]:
    return F.from_probe(nvidia_smi.lost_gpus())


def cuda() -> F.Fact[str | None]:
    return F.from_probe(nvidia_smi.cuda())


def driver() -> F.Fact[str | None]:
    return F.from_probe(nvidia_smi.driver())


# One `docker info` serves every daemon fact; None when docker or its daemon is missing.
DOCKER_INFO = "command -v docker >/dev/null && docker info --format '{{json .}}'"


def docker_info(name: str, key: str) -> F.Fact[str | None]:
    """One field of `docker info`: a string as it is, anything else as JSON text."""
    def parse(out: str, code: int) -> str | None:
        data = parse_json(out, code)
        value = data.get(key) if isinstance(data, dict) else None
        return value if value is None or isinstance(value, str) else json.dumps(value)
    return F.Fact(name, DOCKER_INFO, parse, sudo=True)


def docker_root() -> F.Fact[str | None]:
    return docker_info("docker_root", "DockerRootDir")


# Driver CUDA versions that select different tags (engines.images): 13.x and 12.x.
CUDA_CHOICES = ("13.0", "12.0")


def candidate_images(inv: Inventory) -> list[str]:
    """Every tag the driver could pick (cu13, cu12, or the pinned one)."""
    return sorted({inventory_image(inv, cuda) for cuda in CUDA_CHOICES})


def engine_container(inv: Inventory) -> F.Fact[docker.Container | None]:
    """The engine container as a facts.docker.Container, or None when there is none. The
    image tags ride along: the image step asks the same command, and a batch runs it once."""
    return F.from_probe(docker.container_probe(inv.engine.container, candidate_images(inv)))


def serve_log_path(inv: Inventory) -> str:
    """Where the head's exec'd `vllm serve` writes its output (engines/vllm.py)."""
    return serve_log_host_path(spec_from_inventory.serve_log_dir(inv))


def serve_log(inv: Inventory, is_head: bool, tail: int | None = None,
              name: str = "serve") -> F.Fact[str | None] | None:
    """Over Ray the head's engine is the exec'd `vllm serve`: its output is in the serve log
    file (docker logs there shows `ray start`). None on every other node and layout."""
    if not (is_head and inventory_runs_over_ray(inv)):
        return None
    path = serve_log_path(inv)
    argv = ["tail", "-n", str(tail), path] if tail is not None else ["cat", path]
    return F.command(name, argv, F.raw, sudo=True)


def engine_log(inv: Inventory, is_head: bool, tail: int | None = None,
               name: str = "log") -> F.Fact[str | None]:
    """The engine's own output on this node: the serve log (serve_log), else docker logs."""
    return serve_log(inv, is_head, tail, name) or \
        F.command(name, docker_logs_argv(inv.engine.container, tail), F.raw, sudo=True)


def engine_images(inv: Inventory) -> F.Fact[dict[str, docker.Image]]:
    return _images(inv.engine.container, candidate_images(inv))


def parse_images(out: str, refs: list[str]) -> dict[str, docker.Image]:
    """Each present reference (tag or digest, image_ref.present) -> its id and digests."""
    docs = [d for d in docker.documents(out) if "State" not in d]   # containers have a State
    found = {ref: image_ref.present(ref, docs) for ref in refs}
    return {ref: docker.Image(doc.get("Id"), _repo_digests(doc))
            for ref, doc in found.items() if doc is not None}


def _repo_digests(doc: Mapping[str, object]) -> tuple[str, ...]:
    """An image document's RepoDigests (moby's image inspect: a list of strings), or none."""
    listed = doc.get("RepoDigests")
    return tuple(d for d in listed if isinstance(d, str)) if isinstance(listed, list) else ()


def _images(name: str, tags: list[str]) -> F.Fact[dict[str, docker.Image]]:
    """Each present candidate reference -> its image id and registry digests."""
    return F.Fact("images", docker.inspect_script(name, tags),
                  lambda out, _code: parse_images(out, tags), sudo=True)


def node_rank_arg(cmd: tuple[str, ...] | list[str]) -> str | None:
    """The --node-rank a running engine container was started with (None: no such flag)."""
    cmd = [str(c) for c in cmd]
    return cmd[cmd.index("--node-rank") + 1] if "--node-rank" in cmd[:-1] else _dp_node_rank(cmd)


def _dp_node_rank(cmd: list[str]) -> str | None:
    """vLLM's mp executor across nodes names no node rank: each node's is its first DP rank
    (--data-parallel-start-rank, 0 on the API node) over its --data-parallel-size-local
    (engines/vllm.py); None for any other command."""
    def value(flag: str, default: str | None = None) -> str | None:
        return cmd[cmd.index(flag) + 1] if flag in cmd[:-1] else default
    local, start = value("--data-parallel-size-local"), value("--data-parallel-start-rank", "0")
    if "--data-parallel-address" not in cmd or local is None or start is None:
        return None
    try:
        return str(int(start) // int(local)) if int(local) > 0 else None
    except ValueError:
        return None


def file_json(name: str, path: str, sudo: bool = False) -> AnyFact:
    return F.read(name, path, parse_json, sudo=sudo)


def chosen_image(cuda: str | None, node: NodeContext) -> str:
    """The image this node runs, from its CUDA (the image and launch steps ask the same)."""
    try:
        return inventory_image(node.inv, cuda)
    except ImageChoiceError as err:
        raise StepFailed(node.name, str(err), step="image") from None


def fabric_facts() -> list[AnyFact]:
    """The node's HCA ports, /dev/infiniband and nvidia_peermem (facts/fabric.py): preflight
    judges them, launch passes the HCAs into the container; one command each per batch."""
    return [F.from_probe(p) for p in fabric.probes()]


# NCCL prints its init lines when the group forms, and the engine its phases' lines as it
# starts, in the log's start-up part; an engine that served for days has a request line per
# request after it, which every look (each no-op `up`, each `status`) would otherwise read whole.
STARTUP_LOG_LINES = 20000
NCCL_LINES_KEPT = 40   # the last init's lines: a few per rank, a relaunch appends its own
# Lines read of each NCCL debug file (one per rank process): its init and channel lines come
# first, at communicator init; what NCCL's NET subsystem logs later is not needed here.
NCCL_FILE_LINES = 2000


def nccl_files_script(inv: Inventory) -> str:
    """The engine's NCCL debug files (engines/fabric.py NCCL_DEBUG_FILE: "%h.%p.log" in the
    node's NCCL log dir, cleared at each launch), the first lines of each; nothing when there
    are none (the glob stays unexpanded and head's complaint is dropped)."""
    return f"head -q -n {NCCL_FILE_LINES} -- {nccl_files_glob(inv)} 2>/dev/null"


def nccl_files_glob(inv: Inventory) -> str:
    """The shell glob of the node's NCCL debug files (the dir quoted, the pattern not)."""
    return f"{shlex.quote(spec_from_inventory.nccl_log_dir(inv))}/*.log"


def _startup_lines(inv: Inventory, is_head: bool) -> str:
    """One read of the engine's log (serve_log's file on a Ray head, whose serve prints its Ray
    workers' lines too) and of NCCL's debug files for what its start-up printed: every phase
    line (engines/startup_phases.py), NCCL's last init lines and one line of each kind of
    GPUDirect evidence (facts/nccl.py). The files come last, so their init lines are the last
    ones: NCCL writes its lines there, line-buffered, and to the block-buffered stdout only
    when the file was not set. The NCCL fact and the dry-fire's phases ask this same command:
    the batch runs it once."""
    log = serve_log(inv, is_head)
    read = log.script if log else shlex.join(docker_logs_argv(inv.engine.container))
    program = ("$0 ~ phase { print; next } $0 ~ init { kept[n++ % keep] = $0; next } "
               "$0 ~ gdr { seen[\"gdr\"] = $0; next } $0 ~ chan { seen[\"chan\"] = $0; next } "
               "$0 ~ dmabuf { seen[\"dmabuf\"] = $0 } "
               "END { for (i = (n > keep ? n - keep : 0); i < n; i++) print kept[i % keep]; "
               "for (k in seen) print seen[k] }")
    awk = shlex.join(["awk", "-v", f"phase={startup_phases.LOG_PATTERN}",
                      "-v", f"init={nccl.INIT_PATTERN}", "-v", f"gdr={nccl.GDR_PATTERN}",
                      "-v", f"chan={nccl.CHANNEL_PATTERN}", "-v", f"dmabuf={nccl.DMABUF_PATTERN}",
                      "-v", f"keep={NCCL_LINES_KEPT}", program])
    return (f"{{ {read} 2>&1 | head -n {STARTUP_LOG_LINES}; {nccl_files_script(inv)}; }} "
            f"| {awk}")


def nccl_transport(inv: Inventory, is_head: bool = False) -> F.Fact[nccl.NcclTransport | None]:
    """NCCL's init lines in the engine's log -> facts/nccl.NcclTransport, or None: NCCL not
    initialised yet."""
    return F.Fact("nccl", _startup_lines(inv, is_head),
                  lambda out, code: nccl.parse_transport(out), sudo=True)


def startup_phase_times(inv: Inventory, is_head: bool = False) -> F.Fact[dict[str, float]]:
    """The engine's start-up phases -> seconds each (engines/startup_phases.py)."""
    return F.Fact("phases", _startup_lines(inv, is_head),
                  lambda out, code: startup_phases.phases(out), sudo=True)


def engine_exit(node: str, message: str, step: str, log: str, image: str | None,
                hint: str) -> StepFailed:
    """An engine that exited during its start-up: the image's fault when its engine refused the
    model's parser (engines/parsers.py; another image is the fix), else `hint`'s."""
    lacking = parsers.unknown_model_parser(log, image)
    if lacking:
        return EngineImageError(node, message, step=step, hint=lacking)
    return StepFailed(node, message, step=step, hint=hint)


DOC_READING = bundled("doc_reading.py")


def download_reading(inv: Inventory, name: str = "download",
                     parse: Callable[[str, int], object] = parse_reading) -> AnyFact:
    """The downloader's progress and whether it lives (remote/protocol.py read_document, the
    reading the download step's weights_status.py makes too): what `status` shows and
    stop-download stops. In the batch's one Python interpreter: no process of its own."""
    paths = WorkPaths(inv.paths.work)
    return F.python(name, DOC_READING, ["download", paths.progress, paths.pid], parse)

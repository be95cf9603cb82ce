"""The document `status` builds (`status --json` prints it; `status` and `watch` read it): its
shape, one TypedDict per record. The node's own documents inside it (the guard's incident,
the container's and /health's summaries, the download's progress) stay the JSON the node
wrote; their readers narrow what they read."""

from __future__ import annotations

from typing import Generic, NotRequired, TypedDict, TypeVar

from k3deploy.core.jsonvalue import JSON
from k3deploy.core.state import StepRecord, TornDown
from k3deploy.facts.docker import Container
from k3deploy.facts.http import Endpoint

C = TypeVar("C")
H = TypeVar("H")


class FabricView(TypedDict):
    """One node's NCCL transport and HCAs (status_fabric.node_view)."""
    nccl_transport: str | None
    nccl_devices: list[str]
    gpudirect: bool | None
    gpudirect_evidence: str | None
    hcas: list[str]


class LiveRecord(TypedDict, Generic[C, H]):
    """What a node says now (status_cmd._live); an unreachable node says only why."""
    reachable: bool
    error: NotRequired[str]
    container: NotRequired[C]
    health: NotRequired[H]                           # the head's /health
    download: NotRequired[dict[str, JSON] | None]    # status_docs.download_view
    incident: NotRequired[dict[str, JSON] | None]    # the guard's incident.json, as it wrote it
    identity: NotRequired[dict[str, JSON]]
    gpus: NotRequired[list[dict[str, JSON]]]
    guard: NotRequired[str]
    fabric: NotRequired[FabricView]
    guard_last_seen: NotRequired[dict[str, JSON]]   # status_docs.last_seen


# As looked (the records cluster_state decides by), and in the document (their summaries,
# facts/docker.py and facts/http.py, for --json)
Looked = LiveRecord[Container | None, Endpoint | None]
Live = LiveRecord[dict[str, JSON] | None, dict[str, JSON] | None]


class TornDownView(TornDown):
    when: str          # `at`, readable


class NodeDoc(TypedDict):
    rank: int
    live: Live
    state: dict[str, StepRecord]      # the state file's steps, as status marks them
    replaced: bool                    # the node answers as another machine
    torn_down: TornDownView | None


class ClusterDoc(TypedDict):
    name: str
    state: str                        # cluster_state: serving, stopped-by-guard, down, ...
    incident: dict[str, JSON] | None  # the first incident, as its guard wrote it
    since: NotRequired[str]
    recorded_on: NotRequired[list[JSON]]
    nccl_transport: NotRequired[str | list[str] | None]
    fabric_warning: NotRequired[str | None]


class Unknown(TypedDict):
    """What watch shows when a look fails as a whole (the inventory broke meanwhile, ...)."""
    name: str
    state: str
    incident: None
    error: str


Observed = ClusterDoc | Unknown   # what watch looks at


class CostView(TypedDict):
    gpus: int
    per_gpu_hour: float
    currency: str
    per_hour: float
    seconds: float
    spent: float | None               # None: no engine running
    launched_at: float | None
    seconds_since_launch: float | None


class StatusDoc(TypedDict):
    cluster: ClusterDoc
    nodes: dict[str, NodeDoc]
    fabric: JSON                      # the fabric mesh's last figures (steps/fabric/fabric_mesh.kept)
    run_active: bool
    cost: CostView | None

"""From the inventory (plus facts of one node) to the engine's LaunchSpec."""

from __future__ import annotations

from k3deploy.engines import fabric
from k3deploy.engines.inventory_view import InventoryView, LaunchNode, LaunchView
from k3deploy.engines.spec import LaunchSpec, SpecError
from k3deploy.engines.spec import SGLANG_SECRET_FILE, VLLM_ENV_FILE
from k3deploy.engines.layout import inventory_executor, inventory_runs_over_ray, parallel_layout
from k3deploy.remote.protocol import WorkPaths
from k3deploy.core.errors import BadInputError
from k3deploy.facts.fabric import NodeFabric


def layout_for(inv: InventoryView) -> str:
    return parallel_layout(inv.engine.kind, len(inv.nodes))


def secrets_dir(inv: InventoryView) -> str:
    return WorkPaths(inv.paths.work).secrets


def serve_log_dir(inv: InventoryView) -> str:
    return WorkPaths(inv.paths.work).serve_logs


def nccl_log_dir(inv: InventoryView) -> str:
    return WorkPaths(inv.paths.work).nccl_logs


def api_key_file(inv: InventoryView) -> str:
    """Where the engine's API key file lives on a node (SGLang's --config yaml, vLLM's env file)."""
    name = SGLANG_SECRET_FILE if inv.engine.kind == "sglang" else VLLM_ENV_FILE
    return f"{secrets_dir(inv)}/{name}"


def metrics_on_every_rank(inv: InventoryView) -> bool:
    """SGLang serves /metrics on every node (node rank >= 1: its health server); vLLM only on
    the head's API server."""
    return inv.engine.kind == "sglang"


def _holds_key(inv: InventoryView, rank: int) -> bool:
    """A headless vLLM node (mp executor, rank > 0) serves no API: the key stays off it."""
    return rank == 0 or inventory_executor(inv) != "mp" or len(inv.nodes) == 1


def build(inv: LaunchView, node: LaunchNode, rank: int, image: str, sha: str, with_key: bool,
          node_fabric: NodeFabric | None = None) -> LaunchSpec:
    """node_fabric: the node's facts/fabric.NodeFabric (None: not looked at)."""
    head = inv.head
    hcas, ib_disable = fabric.choice(inv.engine.fabric, node_fabric)
    try:
        return LaunchSpec(
            engine=inv.engine.kind, image=image, container_name=inv.engine.container,
            model_repo=inv.model.repo, revision_sha=sha, nnodes=len(inv.nodes), node_rank=rank,
            gpus_per_node=inv.gpu.count, head_address=head.self_ip, self_address=node.self_ip,
            nic=node.nic, layout=layout_for(inv), hf_cache_host_path=inv.paths.hf,
            secrets_host_dir=secrets_dir(inv) if with_key and _holds_key(inv, rank) else None,
            serve_log_host_dir=serve_log_dir(inv) if rank == 0 and inventory_runs_over_ray(inv)
            else None,
            moe_runner_backend=inv.moe_runner_backend,
            dist_init_port=inv.ports.dist_init, serve_port=inv.ports.serve,
            ray_port=inv.ports.ray, executor=inv.engine.executor if inv.engine.kind == "vllm"
            else None, mem_fraction_static=inv.engine.mem_fraction_static,
            dist_timeout=inv.engine.dist_timeout, context_length=inv.engine.context_length,
            ib_hcas=hcas, ib_disable=ib_disable, nccl_log_host_dir=nccl_log_dir(inv),
            extra_args=dict(inv.engine.args), extra_env={k: str(v) for k, v in inv.engine.env.items()})
    except SpecError as err:
        raise BadInputError(f"{inv.source}: engine settings cannot make a launch for "
                            f"{node.name}: {err}") from None

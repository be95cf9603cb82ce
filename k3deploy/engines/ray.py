"""Ray cluster containers for multi-node vLLM (the pattern of vLLM's run_cluster.sh):
every node runs the vLLM image with `ray start --block` as its main process; the head
then gets `vllm serve` through `docker exec` once every node has joined."""

from __future__ import annotations

from k3deploy.engines.docker import docker_run_argv
from k3deploy.engines.layout import runs_over_ray
from k3deploy.engines.spec import LaunchSpec, SpecError


def _ray_start(spec: LaunchSpec, role: list[str]) -> list[str]:
    # --block keeps ray in the foreground as the container's main process, so the
    # container lives exactly as long as this Ray node. --node-ip-address pins the
    # address Ray advertises (the private NIC), as run_cluster.sh does.
    return ["start", "--block", *role, f"--node-ip-address={spec.self_address}"]


def ray_head_container_argv(spec: LaunchSpec) -> list[str]:
    """Rank 0: `ray start --head --port=6379 --block` in the vLLM image. It carries the
    API key env file because `vllm serve` is later exec'd in this container."""
    _check_ray_spec(spec, head=True)
    cmd = _ray_start(spec, ["--head", f"--port={spec.ray_port}"])
    return docker_run_argv(spec, cmd, entrypoint="ray",
                           env_file=spec.secrets_host_dir is not None)


def ray_worker_container_argv(spec: LaunchSpec) -> list[str]:
    """Rank > 0: `ray start --address=HEAD:6379 --block`; no secrets on workers."""
    _check_ray_spec(spec, head=False)
    cmd = _ray_start(spec, [f"--address={spec.head_address}:{spec.ray_port}"])
    return docker_run_argv(spec, cmd, entrypoint="ray")


def _check_ray_spec(spec: LaunchSpec, *, head: bool) -> None:
    if not runs_over_ray(spec.engine, spec.nnodes, spec.executor):
        raise SpecError("a Ray cluster is only used for multi-node vLLM with executor ray")
    if head != spec.is_head:
        want = "rank 0" if head else "a rank > 0"
        raise SpecError(f"this container is for {want}, got rank {spec.node_rank}")

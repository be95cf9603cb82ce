"""What the launch looks at on a node and what it would run there: its facts, its probes, and
its spec with the compile cache's key. One decision for every step that asks it: launch and
its dry-fire and Ray forms (steps/engine/launch.py), the compile cache's seal (which seals the
launch's own cache) and up's fabric mesh (which leaves a group that already runs it alone)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TypeVar

from k3deploy import engines
from k3deploy.engines import spec_from_inventory
from k3deploy.engines.compile_cache_key import CacheInputs
from k3deploy.engines.spec import LaunchSpec
from k3deploy.facts import docker, http
from k3deploy.facts.docker import Container
from k3deploy.facts.fabric import IbPort
from k3deploy.facts.nvidia_smi import Gpu
from k3deploy.facts.ray import RayStatus
from k3deploy.node import facts as F
from k3deploy.steps.base import AnyFact, settled
from k3deploy.node.context import NodeContext
from k3deploy.steps import probes as step_probes
from k3deploy.steps.engine import compile_cache_prepare, raylayout
from k3deploy.steps.fabric.fabric_topology import node_fabric
from k3deploy.steps.probes import chosen_image


class NotObserved(RuntimeError):
    """A derived fact read from a record that `observe` did not make (a programming error,
    never the user's)."""


@dataclass(frozen=True)
class LaunchFacts:
    """What launch looks at on a node (its probes' values, by name) and what it runs there.
    The compile-cache key's and the fabric's facts default to "not looked at": a fixture
    gives only what a plan reads."""

    cuda: str | None
    container: Container | None
    # the compile-cache key's inputs (compile_cache_prepare.key_probes)
    driver: str | None = None
    gpus: tuple[Gpu, ...] | None = None
    images: dict[str, docker.Image] = field(default_factory=dict)
    node_files: dict[str, str] | None = None
    # the node's fabric (probes.fabric_facts): the HCAs the container gets
    ib_ports: tuple[IbPort, ...] | None = None
    ib_devices: tuple[str, ...] | None = None
    gpudirect_rdma: bool = False
    key_file_sha: str | None = None        # the endpoint key file's sha256; None: no file
    # the head over Ray only (raylayout.head_probes)
    ray: RayStatus | None = None
    health: http.Endpoint | None = None
    log: str | None = None                 # only while a wait looks (wait_probes)
    # derived (observe): what this node's launch runs, and its compile-cache key's inputs
    # (None over Ray: the ray-cluster step starts those containers, with no cache)
    spec: LaunchSpec | None = None
    key_inputs: CacheInputs | None = None

    @property
    def launch_spec(self) -> LaunchSpec:
        """`spec`, which `observe` derives on every layout the launch runs on (None only off
        the Ray layout in ray-cluster's facts, whose plan reads none there)."""
        if self.spec is None:
            raise NotObserved(f"{type(self).__name__}.spec read before observe derived it")
        return self.spec

    @property
    def healthy(self) -> bool:
        """Over Ray, on the head: its serve answers /health."""
        return raylayout.head_healthy(self.ray, self.health)


Seen = TypeVar("Seen", bound=LaunchFacts)


def _as_is(spec: LaunchSpec) -> LaunchSpec:
    return spec


def probes(node: NodeContext, serves_over_ray: bool = True) -> list[AnyFact]:
    """The launch's look on `node`; `serves_over_ray` False: the head's Ray look is left out
    (the ray-cluster step starts the containers, the launch serves over them)."""
    # The key file's place depends on the inventory alone, not on facts.
    key_path = spec_from_inventory.api_key_file(node.inv)
    found = [*compile_cache_prepare.key_probes(node.inv), step_probes.engine_container(node.inv),
             *step_probes.fabric_facts(),
             F.native("key_file_sha", "sha256_hex", [key_path], F.text, sudo=True)]
    if serves_over_ray and raylayout.in_use(node.inv) and node.is_head:
        found += raylayout.head_probes(node)
    return found


def spec_and_cache_key(facts: LaunchFacts, node: NodeContext,
                       adjust: Callable[[LaunchSpec], LaunchSpec] = _as_is,
                       ) -> tuple[LaunchSpec, CacheInputs | None]:
    """(the launch spec with its config label, the compile cache key's inputs or None), from
    the probes' values in `facts` (any launch Facts); `adjust` changes the spec before its
    cache key and label (the dry-fire's dummy weights)."""
    run = node.run
    spec = adjust(spec_from_inventory.build(
        node.inv, node.node, node.rank, chosen_image(facts.cuda, node),
        settled(run.inputs.manifest, "manifest").sha, with_key=bool(run.inputs.api_key),
        node_fabric=node_fabric(facts)))
    inputs = None
    if not engines.uses_ray(spec):  # Ray's containers are started by ray-cluster
        spec, inputs = compile_cache_prepare.keyed(spec, facts, node.inv)
    return engines.with_config_label(spec, run.inputs.api_key), inputs


def with_spec(seen: Seen, node: NodeContext,
              adjust: Callable[[LaunchSpec], LaunchSpec] = _as_is) -> Seen:
    """`seen` (any launch Facts: a subclass's, the seal's) with what the launch runs."""
    spec, key_inputs = spec_and_cache_key(seen, node, adjust)
    return replace(seen, spec=spec, key_inputs=key_inputs)
